//! The request body for `model_input = Tokens` (docs/dynamo/request-plane.md §7.2): the
//! preprocessed request with its stop conditions, sampling (guided decoding included),
//! output options and routing hints, in the key order 1.6.1 writes (the rules of
//! [`super::payload`]; [`super::reqenc`] writes the same bytes by hand on the hot path).
//! Re-exported by [`super::payload`]. Pure data, no I/O.

use serde::{Deserialize, Serialize};

/// The request body for `model_input = Tokens` (docs/dynamo/request-plane.md §7.2). Every key here was seen on the
/// wire; all ten top-level keys are always sent by 1.6.1.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PreprocessedRequest {
    /// Card `display_name`.
    pub model: String,
    /// Prompt tokens after template + tokenization.
    pub token_ids: Vec<u32>,
    pub stop_conditions: StopConditions,
    pub sampling_options: SamplingOptions,
    pub output_options: OutputOptions,
    pub eos_token_ids: Vec<u32>,
    pub mdc_sum: Option<String>,
    pub annotations: Vec<String>,
    /// `{}` when there are no hints (what 1.6.1 sends); omitted when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingHints>,
    /// Always present, `nil` in every capture. (The rarely set JSON members are boxed: they
    /// keep the request under 1 KB, a small allocation.)
    pub router_config_override: Option<Box<serde_json::Value>>,
    /// Disaggregated serving, to a decode worker: what its prefill worker answered
    /// (`{disaggregated_params, prompt_tokens_details}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_result: Option<Box<serde_json::Value>>,
    /// Disaggregated serving, to both legs: the prefill worker's KV rendezvous
    /// (`{bootstrap_host, bootstrap_port, bootstrap_room, handoff_id}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap_info: Option<Box<BootstrapInfo>>,
    /// Options 1.6.1 forwards outside the typed groups: `{"nvext": {cache_salt, extra_fields,
    /// metadata_upload, token_in}, "sampling_options": {detokenize, allowed_token_ids,
    /// bad_words_token_ids, logprob_token_ids}}`, each member only when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_args: Option<Box<serde_json::Value>>,
    /// `nvext.router` (latency targets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router: Option<Box<serde_json::Value>>,
    /// vLLM's multimodal processor options, passed through.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mm_processor_kwargs: Option<Box<serde_json::Value>>,
    /// Media decoding options, passed through.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_io_kwargs: Option<Box<serde_json::Value>>,
    /// `nvext.request_timestamp_ms` (trace replay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_timestamp_ms: Option<f64>,
}

/// `stop_conditions`: every key always serialized.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StopConditions {
    pub max_tokens: Option<u32>,
    pub stop: Option<Vec<String>>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub stop_token_ids_visible: Option<Vec<u32>>,
    /// = `eos_token_ids` unless `ignore_eos`.
    pub stop_token_ids_hidden: Option<Vec<u32>>,
    pub min_tokens: Option<u32>,
    pub ignore_eos: Option<bool>,
    pub max_thinking_tokens: Option<u32>,
}

/// `sampling_options`: every key always serialized; floats are f32 (msgpack float32).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingOptions {
    pub n: Option<u8>,
    pub best_of: Option<u8>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub min_p: Option<f32>,
    pub use_beam_search: Option<bool>,
    pub length_penalty: Option<f32>,
    pub seed: Option<i64>,
    pub include_stop_str_in_output: Option<bool>,
    pub guided_decoding: Option<Box<GuidedDecoding>>,
}

/// `sampling_options.guided_decoding`: the output must follow one constraint (JSON schema,
/// regex, choice or grammar); only the members set are sent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuidedDecoding {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub choice: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grammar: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whitespace_pattern: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structural_tag: Option<serde_json::Value>,
}

/// `output_options`: every key always serialized but `no_stop_trim`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OutputOptions {
    /// Completions `no_stop_trim`, sent only when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_stop_trim: Option<bool>,
    pub logprobs: Option<u32>,
    pub prompt_logprobs: Option<u32>,
    pub skip_special_tokens: Option<bool>,
    pub formatted_prompt: Option<bool>,
    pub return_tokens_as_token_ids: Option<bool>,
}

/// `routing`: every key skip-if-none, so the empty hints are `{}` \[O\]. Key names are \[S\];
/// keys whose type is not known are kept as JSON values.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RoutingHints {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_instance_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_worker_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_worker_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dp_rank: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_dp_rank: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_salt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_jump: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict_priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_worker_ids: Option<Vec<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing_constraints: Option<serde_json::Value>,
}

/// `bootstrap_info`: where the two legs of a disaggregated request meet to move its KV blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootstrapInfo {
    pub bootstrap_host: String,
    pub bootstrap_port: u16,
    /// Random in `0..=i64::MAX`, congruent to the prefill rank modulo the worker's ranks.
    pub bootstrap_room: u64,
    /// A UUID: 16 bytes in msgpack, the hyphenated text in JSON (as a Rust `Uuid` serializes).
    #[serde(with = "uuid_bytes")]
    pub handoff_id: u128,
}

/// A `u128` UUID as the `uuid` crate serializes one: bytes (big-endian) for binary formats,
/// hyphenated text for human-readable ones.
mod uuid_bytes {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u128, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&crate::util::format_uuid(*v))
        } else {
            s.serialize_bytes(&v.to_be_bytes())
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            u128::from_str_radix(&s.replace('-', ""), 16).map_err(D::Error::custom)
        } else {
            let b = serde_bytes_vec(d)?;
            let a: [u8; 16] = b.as_slice().try_into().map_err(|_| D::Error::custom("a UUID is 16 bytes"))?;
            Ok(u128::from_be_bytes(a))
        }
    }

    fn serde_bytes_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("16 bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_bytes(V)
    }
}
