//! Completion-specific validation: the layer-2 order for `/v1/completions`, prompt shapes,
//! `prompt_embeds` (padded standard base64 of 100 bytes to 10 MiB) and the batch × `n` limit.

use super::{
    bad_request, common, logit_bias, max_tokens, model, n, n_with_temperature, range, stop, stream_options, top_p,
    unsupported, user, Check, MAX_N,
};
use crate::error::Error;
use crate::openai::completions::{NvCreateCompletionRequest, Prompt};
use crate::openai::ParseOptions;

/// Validates a completion request.
pub(crate) fn completion(
    req: &NvCreateCompletionRequest,
    unknown: &[String],
    opts: &ParseOptions,
) -> Result<(), Error> {
    stream_options(req.stream, req.stream_options.is_some()).map_err(bad_request)?;
    completion_fields(req, unknown, opts).map_err(bad_request)
}

fn completion_fields(req: &NvCreateCompletionRequest, unknown: &[String], opts: &ParseOptions) -> Check {
    unsupported(unknown, opts, req.passthrough_extras())?;
    model(&req.model)?;
    match &req.prompt_embeds {
        Some(embeds) => prompt_embeds(embeds)?,
        None => prompt(&req.prompt)?,
    }
    if req.suffix.as_ref().is_some_and(|s| s.len() > 10000) {
        return Err("Suffix is too long, maximum 10000 characters".into());
    }
    max_tokens("Max tokens", req.max_tokens)?;
    range("Temperature", req.temperature, 0.0, 2.0)?;
    top_p(req.top_p)?;
    n(req.n)?;
    if let Some(v) = req.logprobs {
        if v > 5 {
            return Err(format!("Logprobs must be between 0 and 5, got {v}"));
        }
    }
    stop(req.stop.as_ref())?;
    range("Presence penalty", req.presence_penalty, -2.0, 2.0)?;
    range("Frequency penalty", req.frequency_penalty, -2.0, 2.0)?;
    if let Some(best_of) = req.best_of {
        if best_of > 20 {
            return Err(format!("Best_of must be between 0 and 20, got {best_of}"));
        }
        if let Some(n) = req.n.filter(|n| best_of < *n) {
            return Err(format!("Best_of must be greater than or equal to n, got best_of={best_of} and n={n}"));
        }
    }
    logit_bias(req.logit_bias.as_ref())?;
    user(req.user.as_deref())?;
    common(req.repetition_penalty, req.min_p, req.top_k)?;
    n_with_temperature(req.n, req.temperature)?;
    let batch = req.prompt.batch_size();
    let per_prompt = usize::from(req.n.unwrap_or(1));
    let total = batch.saturating_mul(per_prompt);
    if total > usize::from(MAX_N) {
        return Err(format!(
            "Total choices (batch_size × n = {batch} × {per_prompt} = {total}) exceeds maximum \
             of {MAX_N}"
        ));
    }
    if req.add_generation_prompt.is_some() || req.continue_final_message.is_some() {
        return Err("`add_generation_prompt` and `continue_final_message` are only supported on \
                    /v1/chat/completions"
            .into());
    }
    Ok(())
}

fn prompt(prompt: &Prompt) -> Check {
    match prompt {
        Prompt::String(s) if s.is_empty() => Err("Prompt string cannot be empty".into()),
        Prompt::String(_) => Ok(()),
        Prompt::StringArray(v) => {
            if v.is_empty() {
                return Err("Prompt string array cannot be empty".into());
            }
            match v.iter().position(String::is_empty) {
                Some(i) => Err(format!("Prompt string at index {i} cannot be empty")),
                None => Ok(()),
            }
        }
        Prompt::IntegerArray(v) if v.is_empty() => Err("Prompt integer array cannot be empty".into()),
        Prompt::IntegerArray(_) => Ok(()),
        Prompt::ArrayOfIntegerArray(v) => {
            if v.is_empty() {
                return Err("Prompt array of integer arrays cannot be empty".into());
            }
            match v.iter().position(Vec::is_empty) {
                Some(i) => Err(format!("Prompt integer array at index {i} cannot be empty")),
                None => Ok(()),
            }
        }
    }
}

/// `prompt_embeds`: canonical padded standard base64 of 100 bytes to 10 MiB.
fn prompt_embeds(embeds: &str) -> Check {
    const MIN: usize = 100;
    const MAX: usize = 10 * 1024 * 1024;
    let len = base64_decoded_len(embeds.as_bytes())
        .ok_or_else(|| "prompt_embeds must be valid base64-encoded data".to_string())?;
    if len < MIN {
        return Err(format!("prompt_embeds decoded data must be at least {MIN} bytes, got {len} bytes"));
    }
    if len > MAX {
        return Err(format!("prompt_embeds decoded data exceeds maximum size of 10MB, got {len} bytes"));
    }
    Ok(())
}

/// Decoded length of canonical, padded, standard-alphabet base64, or `None` if invalid
/// (what the `base64` crate's `STANDARD` engine rejects: bad characters, missing or
/// misplaced padding, non-zero trailing bits).
fn base64_decoded_len(s: &[u8]) -> Option<usize> {
    fn val(c: u8) -> Option<u8> {
        match c {
            b'A'..=b'Z' => Some(c - b'A'),
            b'a'..=b'z' => Some(c - b'a' + 26),
            b'0'..=b'9' => Some(c - b'0' + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    if s.len() % 4 != 0 {
        return None;
    }
    let chunks = s.len() / 4;
    let mut len = 0usize;
    for (i, chunk) in s.chunks_exact(4).enumerate() {
        let pad = chunk.iter().rev().take_while(|c| **c == b'=').count();
        if pad > 2 || (pad > 0 && i + 1 != chunks) {
            return None;
        }
        let mut bits = 0u32;
        for c in &chunk[..4 - pad] {
            bits = (bits << 6) | u32::from(val(*c)?);
        }
        // The bits past the last whole byte must be zero.
        match pad {
            1 if bits & 0b11 != 0 => return None,
            2 if bits & 0b1111 != 0 => return None,
            _ => {}
        }
        len += 3 - pad;
    }
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_lengths() {
        assert_eq!(base64_decoded_len(b""), Some(0));
        assert_eq!(base64_decoded_len(b"TWFu"), Some(3));
        assert_eq!(base64_decoded_len(b"TWE="), Some(2));
        assert_eq!(base64_decoded_len(b"TQ=="), Some(1));
        assert_eq!(base64_decoded_len(b"TR=="), None);
        assert_eq!(base64_decoded_len(b"TWE"), None);
        assert_eq!(base64_decoded_len(b"T==="), None);
        assert_eq!(base64_decoded_len(b"TQ==TWFu"), None);
        assert_eq!(base64_decoded_len(b"TW!u"), None);
    }
}
