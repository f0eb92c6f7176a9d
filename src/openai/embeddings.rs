//! `POST /v1/embeddings` for models whose workers take text (docs/dynamo/surfaces.md §4): the
//! request as 1.6.1 reads it (its types, so a refusal has serde's words and position), the
//! object a worker is sent (the known fields in 1.6.1's order, the rest dropped), and the
//! worker's items folded into the response (lists joined, usage summed, base64 vectors
//! decoded to floats unless the client asked for base64). Shard thread.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Kind};

/// The request, as 1.6.1's type reads it: OpenAI's fields flattened in, then Dynamo's.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename = "NvCreateEmbeddingRequest")]
pub struct NvCreateEmbeddingRequest {
    #[serde(flatten)]
    pub inner: CreateEmbeddingRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_special_tokens: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncate_prompt_tokens: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvext: Option<NvExt>,
}

#[derive(Debug, Deserialize, Serialize)]
pub struct CreateEmbeddingRequest {
    pub model: String,
    pub input: EmbeddingInput,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding_format: Option<EncodingFormat>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
}

/// A string, strings, token ids, or lists of token ids.
#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    String(String),
    StringArray(Vec<String>),
    IntegerArray(Vec<u32>),
    ArrayOfIntegerArray(Vec<Vec<u32>>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EncodingFormat {
    Float,
    Base64,
}

/// Dynamo's extension of an embeddings request.
#[derive(Debug, Deserialize, Serialize)]
pub struct NvExt {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Vec<String>>,
}

/// One vector: floats, or the little-endian f32 bytes in base64.
#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Debug, Deserialize, Serialize)]
struct Embedding {
    index: u32,
    object: String,
    embedding: Vector,
}

#[derive(Debug, Default, Deserialize, Serialize)]
struct Usage {
    prompt_tokens: u32,
    total_tokens: u32,
}

/// The response (and each of a worker's items).
#[derive(Debug, Deserialize, Serialize)]
struct Response {
    object: String,
    model: String,
    data: Vec<Embedding>,
    usage: Usage,
}

/// Fold a worker's items into the response body: `data` joined in arrival order (indexes as
/// sent), usage summed, `object` and `model` of the first; no item at all is 1.6.1's empty
/// response (model `embedding`). Base64 vectors become floats when `floats`.
pub fn fold(items: Vec<Value>, floats: bool) -> Result<Vec<u8>, Error> {
    let mut out: Option<Response> = None;
    for item in items {
        let next: Response = serde_json::from_value(item)
            .map_err(|e| Error::internal(format!("Failed to fold embeddings stream: {e}")))?;
        match out.as_mut() {
            None => out = Some(next),
            Some(r) => {
                r.data.extend(next.data);
                r.usage.prompt_tokens += next.usage.prompt_tokens;
                r.usage.total_tokens += next.usage.total_tokens;
            }
        }
    }
    let mut r = out.unwrap_or_else(|| Response {
        object: "list".into(),
        model: "embedding".into(),
        data: Vec::new(),
        usage: Usage::default(),
    });
    if floats {
        for e in &mut r.data {
            if let Vector::Base64(s) = &e.embedding {
                let floats =
                    decode_f32s(s).ok_or_else(|| Error::new(Kind::Internal, "Failed to decode embedding payload"))?;
                e.embedding = Vector::Float(floats);
            }
        }
    }
    serde_json::to_vec(&r).map_err(|e| Error::internal(e.to_string()))
}

/// Little-endian f32 values from standard base64 (with padding); `None` when it is not that.
fn decode_f32s(s: &str) -> Option<Vec<f32>> {
    let bytes = crate::util::base64::decode(s)?;
    if bytes.len() % 4 != 0 {
        return None;
    }
    Some(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: &str) -> Result<NvCreateEmbeddingRequest, String> {
        serde_json::from_str(body).map_err(|e| e.to_string())
    }

    #[test]
    fn a_worker_gets_the_known_fields_in_1_6_1_order() {
        let body = r#"{"nvext":{"annotations":["token_ids"]},"model":"emb","bogus":1,"stream":true,"input":["hello"],"truncate_prompt_tokens":16,"add_special_tokens":false,"dimensions":4,"user":"u1","encoding_format":"float"}"#;
        let r = parse(body).unwrap();
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"model":"emb","input":["hello"],"encoding_format":"float","user":"u1","dimensions":4,"add_special_tokens":false,"truncate_prompt_tokens":16,"nvext":{"annotations":["token_ids"]}}"#
        );
    }

    #[test]
    fn refusals_carry_serdes_words_as_1_6_1_does() {
        let e = parse(r#"{"input":"hello"}"#).unwrap_err();
        assert_eq!(e, "missing field `model` at line 1 column 17");
        let e = parse(r#"{"model":"emb","input":[1,"a"]}"#).unwrap_err();
        assert_eq!(e, "data did not match any variant of untagged enum EmbeddingInput at line 1 column 31");
        let e = parse(r#"{"model":"emb","input":"hello","encoding_format":"bogus"}"#).unwrap_err();
        assert_eq!(e, "unknown variant `bogus`, expected `float` or `base64` at line 1 column 57");
        let e = parse("[1]").unwrap_err();
        assert_eq!(e, "invalid type: sequence, expected struct NvCreateEmbeddingRequest at line 1 column 0");
    }

    #[test]
    fn items_fold_and_base64_becomes_floats() {
        let b64 = "AAAAPwAAgL4AAAAAAACAPwAAwD8AAAA+AAAAwAAAgD0=";
        let item = |model: &str, index: u32| json!({"object":"list","data":[{"object":"embedding","embedding":b64,"index":index}],"model":model,"usage":{"prompt_tokens":1,"total_tokens":1}});
        let out = fold(vec![item("emb", 0), item("other", 0)], true).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"object":"list","model":"emb","data":[{"index":0,"object":"embedding","embedding":[0.5,-0.25,0.0,1.0,1.5,0.125,-2.0,0.0625]},{"index":0,"object":"embedding","embedding":[0.5,-0.25,0.0,1.0,1.5,0.125,-2.0,0.0625]}],"usage":{"prompt_tokens":2,"total_tokens":2}}"#
        );
        let kept = fold(vec![item("emb", 0)], false).unwrap();
        assert!(String::from_utf8(kept).unwrap().contains(b64));
        assert_eq!(
            String::from_utf8(fold(Vec::new(), true).unwrap()).unwrap(),
            r#"{"object":"list","model":"embedding","data":[],"usage":{"prompt_tokens":0,"total_tokens":0}}"#
        );
        let bad = json!({"object":"list","data":[{"object":"embedding","embedding":"%%%","index":0}],"model":"emb","usage":{"prompt_tokens":1,"total_tokens":1}});
        assert_eq!(fold(vec![bad.clone()], true).unwrap_err().message(), "Failed to decode embedding payload");
        assert!(fold(vec![bad], false).is_ok());
    }
}
