//! One field list, two request structs: the fast flat struct and Dynamo's nested shape.
//!
//! Dynamo 1.6.1 deserializes a request into `NvCreate…Request { #[serde(flatten)] inner,
//! #[serde(flatten)] common, <direct fields>, #[serde(flatten)] unsupported_fields }`. Because of
//! the flattening, serde buffers the whole body before it looks at any field, so every data
//! error (a missing field, `-1` for a `u32`, an unknown role) is reported at the end of the
//! body, while errors in the direct fields (`nvext`, `chat_template_args`, …) are reported where
//! they happen. Clients see those line/column numbers, so we must reproduce them.
//!
//! Reproducing them on every request would cost a buffered copy of the body. Instead
//! `request_types!` declares, from one field list:
//!
//! * the public **flat** struct: every field at top level, `deny_unknown_fields`, parsed in one
//!   streaming pass. This is the hot path; it succeeds exactly when Dynamo would parse the body
//!   without finding unsupported parameters (same field types, same serde attributes).
//! * the private **shape** struct, laid out like Dynamo's and bearing the same Rust name in a
//!   private submodule (serde prints Rust type names in errors). It is only used when the flat
//!   parse fails: it either yields Dynamo's exact serde error, or (unknown fields present) the request
//!   plus the unknown names, which validation then reports as `Unsupported parameter(s)`.
//!
//! Both are generated from the same tokens, so they cannot drift apart; the integration tests
//! check a body that sets every field through both paths.
//!
//! Groups of the field list:
//! * `inner`: OpenAI's request (Dynamo's flattened `inner`),
//! * `common`: Dynamo's flattened `CommonExt` (shared by chat and completions, see
//!   `common_ext_fields!`),
//! * `direct`: Dynamo's own top-level fields, deserialized in place,
//! * `passthrough`: names Dynamo keeps in its unsupported-fields map but accepts
//!   (`PASSTHROUGH_EXTRA_FIELDS`); kept as raw JSON and type-checked by validation.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// `Some(value)` for any present value, `null` included (a passthrough field set to `null` is
/// present for Dynamo's validation, unlike an `Option<T>` field).
pub(crate) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Declares the flat public request struct and Dynamo's nested shape from one field list.
/// See the module documentation.
macro_rules! request_types {
    (
        $(#[$flat_meta:meta])*
        flat $Flat:ident;
        shape mod $shape:ident;
        inner { $( $(#[$im:meta])* $iname:ident : $ity:ty, )* }
        direct { $( $(#[$dm:meta])* $dname:ident : $dty:ty, )* }
        passthrough { $( $(#[$pm:meta])* $pname:ident, )* }
        common { $( $(#[$cm:meta])* $cname:ident : $cty:ty, )* }
    ) => {
        $(#[$flat_meta])*
        #[derive(Debug, Clone, PartialEq, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $Flat {
            $( $(#[$im])* pub $iname: $ity, )*
            $( $(#[$cm])* pub $cname: $cty, )*
            $( $(#[$dm])* pub $dname: $dty, )*
            $(
                $(#[$pm])*
                #[serde(default, deserialize_with = "crate::openai::shape::present")]
                pub $pname: Option<serde_json::Value>,
            )*
        }

        /// Dynamo's layout of the request, used only when the flat parse fails. The struct
        /// has the flat struct's name because serde prints the Rust type name in errors
        /// (`expected struct NvCreateChatCompletionRequest`).
        pub(crate) mod $shape {
            #[allow(unused_imports)]
            use super::*;

            #[derive(serde::Deserialize)]
            pub(crate) struct $Flat {
                #[serde(flatten)]
                inner: Inner,
                #[serde(flatten, default)]
                common: Common,
                $( $(#[$dm])* $dname: $dty, )*
                #[serde(flatten, default)]
                unsupported: serde_json::Map<String, serde_json::Value>,
            }

            #[derive(serde::Deserialize)]
            struct Inner {
                $( $(#[$im])* $iname: $ity, )*
            }

            #[derive(serde::Deserialize, Default)]
            struct Common {
                $( $(#[$cm])* $cname: $cty, )*
            }

            impl $Flat {
                /// Names of the passthrough fields, in declaration order.
                #[allow(dead_code)]
                pub(crate) const PASSTHROUGH: &'static [&'static str] =
                    &[$(stringify!($pname)),*];

                /// The flat request plus the unsupported top-level names, in request order.
                pub(crate) fn into_flat(self) -> (super::$Flat, Vec<String>) {
                    let $Flat { inner, common, $($dname,)* mut unsupported } = self;
                    let unknown: Vec<String> = unsupported
                        .keys()
                        .filter(|k| !Self::PASSTHROUGH.contains(&k.as_str()))
                        .cloned()
                        .collect();
                    let flat = super::$Flat {
                        $( $iname: inner.$iname, )*
                        $( $cname: common.$cname, )*
                        $( $dname, )*
                        $( $pname: unsupported.remove(stringify!($pname)), )*
                    };
                    (flat, unknown)
                }
            }
        }
    };
}

/// Appends Dynamo's `CommonExt` fields (top-level extensions shared by chat and completions)
/// as the `common { … }` group of a [`request_types!`] invocation.
macro_rules! common_ext_fields {
    ($callback:ident ! { $($head:tt)* }) => {
        $callback! {
            $($head)*
            common {
                /// Ignore the end-of-sequence token and generate up to the token limit.
                ignore_eos: Option<bool>,
                /// Minimum number of tokens to generate.
                min_tokens: Option<u32>,
                /// Number of top tokens to sample from; `-1` or `0` means all.
                top_k: Option<i32>,
                /// Relative probability floor.
                min_p: Option<f32>,
                /// Penalty for repeated tokens; `1` means none.
                repetition_penalty: Option<f32>,
                /// Keep the matched stop string in the output.
                include_stop_str_in_output: Option<bool>,
                /// Guided decoding: JSON schema (any JSON value).
                guided_json: Option<serde_json::Value>,
                /// Guided decoding: regular expression.
                guided_regex: Option<String>,
                /// Guided decoding: context-free grammar.
                guided_grammar: Option<String>,
                /// Guided decoding: the output is exactly one of these.
                guided_choice: Option<Vec<String>>,
                /// Guided decoding backend (e.g. `xgrammar`).
                guided_decoding_backend: Option<String>,
                /// Guided decoding whitespace pattern.
                guided_whitespace_pattern: Option<String>,
                /// Drop special tokens from decoded text (the frontend defaults to `true`).
                skip_special_tokens: Option<bool>,
                /// Number of log probabilities to return per prompt token.
                prompt_logprobs: Option<u32>,
                /// Chat only: end the prompt with the assistant's turn header (default true).
                add_generation_prompt: Option<bool>,
                /// Chat only: leave the last message open for the model to continue.
                continue_final_message: Option<bool>,
            }
        }
    };
}

/// The accessors chat and completion requests share (same fields, same defaults), expanded
/// inside each request's `impl`.
macro_rules! shared_accessors {
    () => {
        /// Stop strings (empty when none, or when `stop` holds token ids).
        pub fn stop_strings(&self) -> &[String] {
            self.stop.as_ref().map_or(&[], $crate::openai::common::Stop::strings)
        }

        /// Stop token ids: from `stop` given as integers, else from the top-level `stop_token_ids`.
        pub fn stop_token_ids(&self) -> Option<Vec<u32>> {
            $crate::openai::chat::stop_token_ids(self.stop.as_ref(), self.stop_token_ids.as_ref())
        }

        /// Whether the answer is streamed.
        pub fn is_streaming(&self) -> bool {
            self.stream.unwrap_or(false)
        }

        /// `stream_options.include_usage`.
        pub fn include_usage(&self) -> bool {
            self.stream_options.is_some_and(|o| o.include_usage)
        }

        /// `stream_options.continuous_usage_stats`.
        pub fn continuous_usage_stats(&self) -> bool {
            self.stream_options.is_some_and(|o| o.continuous_usage_stats)
        }

        /// Top-level `ignore_eos` (1.6.1's `nvext` has no such member).
        pub fn ignore_eos(&self) -> bool {
            self.ignore_eos.unwrap_or(false)
        }

        /// Whether special tokens are dropped from decoded text (default `true`).
        pub fn skip_special_tokens(&self) -> bool {
            self.skip_special_tokens.unwrap_or(true)
        }

        /// Whether a matched stop string is kept in the output (default `false`).
        pub fn include_stop_str_in_output(&self) -> bool {
            self.include_stop_str_in_output.unwrap_or(false)
        }

        /// Number of choices (default 1).
        pub fn choices(&self) -> u8 {
            self.n.unwrap_or(1)
        }

        /// The passthrough extras in Dynamo's order (`cache_salt`, `stop_token_ids`,
        /// `detokenize`, `allowed_token_ids`, `bad_words_token_ids`, `logprob_token_ids`).
        pub(crate) fn passthrough_extras(&self) -> [&Option<serde_json::Value>; 6] {
            [
                &self.cache_salt,
                &self.stop_token_ids,
                &self.detokenize,
                &self.allowed_token_ids,
                &self.bad_words_token_ids,
                &self.logprob_token_ids,
            ]
        }

        /// Cache namespace: `nvext.cache_salt`, else the top-level `cache_salt`.
        pub fn cache_salt(&self) -> Option<&str> {
            self.nvext
                .as_ref()
                .and_then(|n| n.cache_salt.as_deref())
                .or_else(|| self.cache_salt.as_ref().and_then(serde_json::Value::as_str))
        }
    };
}
