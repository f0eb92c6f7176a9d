//! The check an encoder of `--tokenizer` passes before a model uses it: token for token the
//! same ids as the default tokenizer on a set of texts, with and without the post-processor's
//! special tokens. Run once per model on the control thread at load ([`super::model`]).
//!
//! The texts: [`TEXTS`] (a compact cut of what the project's conformance corpus covers —
//! prose, code, numbers, whitespace runs, many scripts, emoji, combining marks, control and
//! zero-width characters, other models' chat markers as plain text), the model's own added
//! tokens in running text (so a token the library splits or matches differently shows), and
//! one long text past the sizes where the libraries start to cut their input into chunks.

use super::backend::Encoder;
use super::tokenizer::Tokenizer;

/// The fixed check texts.
pub const TEXTS: &[&str] = &[
    "",
    "a",
    " ",
    "\n",
    " hello",
    "hello ",
    "  hello  ",
    "Hello, world! How are you today?",
    "I'm sure they'll say it's fine, but we'd've known. DON'T SHOUT; y'all're OK, isn't it?",
    "In 2024, 3.14159 × 10^-7 ≈ 0.000000314; call 555-0199 or 1234567890123. 1,000,000.50 $5 €20 ¥300",
    "31415926535897932384626433832795028841971693993751 000 0007 12a34b",
    "fn main() {\n    let x: Vec<u32> = (0..10).map(|i| i * 2).collect();\n    println!(\"{:?}\", x);\n}\n",
    "def f(a, b=None):\n\tif a:\n\t\treturn {'k': [1, 2, 3]}\n\treturn b  # done\n",
    "  leading spaces\n\n\n\ttabs\t\tand   multiple    spaces   \r\n trailing   ",
    "                 x\n\n\n\n\n \n \n\t \t\u{3000}ideographic space",
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\", \"n\": [1, 2.5, -3e8]}}",
    "你好，世界！这是一个测试。日本語のテキストも含みます。한국어 문장도 있습니다.",
    "Emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 and ❤️ ✅🚀",
    "Café naïve résumé — e\u{301} vs é; Å vs A\u{30A}; ﬁ ligature; Ⅻ; ｆｕｌｌｗｉｄｔｈ; ǅ ẞ ß",
    "Привет мир. Γειά σου κόσμε. مرحبا بالعالم. שלום עולם. नमस्ते दुनिया. สวัสดีชาวโลก ქართული",
    "# Title\n\n- item **bold** _it_ `code`\n> quote\n\n| a | b |\n|---|---|\n| 1 | 2 |\n",
    "https://example.com/path?q=1&r=two#frag user.name+tag@example.org C:\\Users\\x\\file.txt",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!!!!!!!!!!??????.........------=====",
    "Wait... what?! (Really) [yes] {no} <maybe> \"quoted\" 'single' `back`; a—b–c … «guillemets»",
    "\u{0}\u{1}\u{7}\u{1b}[0m\u{7f}\u{200b}zero\u{feff}width\u{a0}nbsp\u{200d}\u{2028}\u{fffd}",
    "∀x∈ℝ: x²≥0 ⇒ √(x²)=|x| ∑ ∫ ∂ ∞ ≠ ≤ ≥ ± µ Ω ℏ ⊕ ⟨ψ|φ⟩",
    "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism supercalifragilistic",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀 ꙮ 𝟘𝟙𝟚 \u{10ffff} \u{e000}",
    "<div class=\"a\">&amp; &lt;tag&gt;</div><br/><!-- comment --><script>x<y</script>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi <|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n<pad><unk></s><s>",
    "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜></think>ok<｜end▁of▁sentence｜>",
    "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>assistant<|channel|>final<|message|>Hi<|return|>",
    "text <|im_end|> more  <|endoftext|>  end<|im_end|><|im_end|>x",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call> <tool_response>ok</tool_response>",
];

/// Bytes of the long check text: past 64 KiB, where fastokens cuts its scan and its regex
/// splits into chunks (and basetenkenizer from 16 KiB).
const LONG_BYTES: usize = 80 * 1024;

/// Why an encoder is not the default's equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub message: String,
}

/// Check `enc` against `default` on every check text, with and without special tokens.
pub fn check(default: &Tokenizer, enc: &Encoder) -> Result<(), Mismatch> {
    for (i, text) in texts(default).iter().enumerate() {
        for add_special_tokens in [false, true] {
            let mut want = Vec::new();
            // A text the default itself cannot encode says nothing about the other encoder.
            if default.encode_default_into(text, add_special_tokens, &mut want).is_err() {
                continue;
            }
            let mut got = Vec::new();
            if let Err(e) = enc.encode_into(text, add_special_tokens, &mut got) {
                return Err(Mismatch { message: format!("check text {i} ({}): {e}", preview(text)) });
            }
            if got != want {
                let at = want.iter().zip(&got).position(|(a, b)| a != b).unwrap_or(want.len().min(got.len()));
                let specials = if add_special_tokens { ", special tokens added" } else { "" };
                return Err(Mismatch {
                    message: format!(
                        "check text {i} ({}{specials}): {} ids against the default's {}, first different at {at} \
                         ({:?} against {:?})",
                        preview(text),
                        got.len(),
                        want.len(),
                        got.get(at),
                        want.get(at),
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Every check text for `default`'s model: [`TEXTS`], its added tokens in running text, and
/// the long text.
pub fn texts(default: &Tokenizer) -> Vec<String> {
    let mut out: Vec<String> = TEXTS.iter().map(|t| t.to_string()).collect();
    // The added tokens, a hundred to a text, each alone, glued to words, between spaces and
    // newlines, and between other scripts and digits.
    let added = default.added_token_texts();
    for chunk in added.chunks(100) {
        let mut t = String::new();
        for tok in chunk {
            for (before, after) in [("", ""), (" word", "next "), ("  ", "\n\n"), ("数", "1")] {
                t.push_str(before);
                t.push_str(tok);
                t.push_str(after);
            }
        }
        out.push(t);
    }
    let mut long = String::with_capacity(LONG_BYTES + 4096);
    'fill: loop {
        for t in TEXTS {
            long.push_str(t);
            long.push('\n');
            if long.len() > LONG_BYTES {
                break 'fill;
            }
        }
    }
    out.push(long);
    out
}

/// The start of `text`, escaped, for a log line.
fn preview(text: &str) -> String {
    let head: String = text.chars().take(24).collect();
    let more = if head.len() < text.len() { "…" } else { "" };
    format!("{head:?}{more}")
}
