//! Message content: a string or an array of typed parts, the part payloads (text, image,
//! video, audio, input audio, refusal), and the checks Dynamo's types imply for media URLs.
//!
//! [`MessageContent`] and [`ContentPart`] are shared by all roles. Which part types a role
//! accepts is decided while deserializing, by the private per-role "wire" enums declared at the
//! bottom under Dynamo's type names (serde prints them: `data did not match any variant of
//! untagged enum ChatCompletionRequestUserMessageContent`). A part of an unknown type fails the
//! request, as in Dynamo; it is not kept.

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// Message content: a string or an array of typed parts.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// `"content": "…"`.
    Text(String),
    /// `"content": [{"type": …}, …]`.
    Parts(Vec<ContentPart>),
}

impl MessageContent {
    /// The text parts (or the whole string), in order.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        let (one, many) = match self {
            MessageContent::Text(s) => (Some(s.as_str()), &[][..]),
            MessageContent::Parts(p) => (None, p.as_slice()),
        };
        one.into_iter().chain(many.iter().filter_map(|p| match p {
            ContentPart::Text(t) => Some(t.text.as_str()),
            _ => None,
        }))
    }
}

/// One typed content part.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// `text`.
    Text(TextPart),
    /// `image_url`.
    ImageUrl(ImagePart),
    /// `video_url`.
    VideoUrl(VideoPart),
    /// `audio_url`.
    AudioUrl(AudioPart),
    /// `input_audio` (base64 data).
    InputAudio(InputAudioPart),
    /// `refusal` (assistant only).
    Refusal(RefusalPart),
}

/// `{"type": "text", "text": …}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct TextPart {
    /// The text.
    pub text: String,
}

/// `{"type": "refusal", "refusal": …}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct RefusalPart {
    /// The refusal text.
    pub refusal: String,
}

/// `{"type": "image_url", …}`. `image_url` is `None` for `null`, absent, or `{"url": ""}`
/// (vLLM cache hits carried by `uuid`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ImagePart {
    /// The image.
    #[serde(default, deserialize_with = "optional_media", skip_serializing_if = "Option::is_none")]
    pub image_url: Option<ImageUrl>,
    /// vLLM processor-cache identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

/// `{"type": "video_url", …}`; see [`ImagePart`].
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct VideoPart {
    /// The video.
    #[serde(default, deserialize_with = "optional_media", skip_serializing_if = "Option::is_none")]
    pub video_url: Option<ImageUrl>,
    /// vLLM processor-cache identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

/// `{"type": "audio_url", …}`; see [`ImagePart`].
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct AudioPart {
    /// The audio.
    #[serde(default, deserialize_with = "optional_media", skip_serializing_if = "Option::is_none")]
    pub audio_url: Option<AudioUrl>,
    /// vLLM processor-cache identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

/// Image or video reference.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ImageUrl {
    /// URL or `data:` URI.
    pub url: Url,
    /// Detail level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<ImageDetail>,
    /// Legacy cache identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
}

/// Audio reference.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct AudioUrl {
    /// URL or `data:` URI.
    pub url: Url,
    /// Legacy cache identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
}

/// `auto`, `low` or `high`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageDetail {
    /// `auto`.
    Auto,
    /// `low`.
    Low,
    /// `high`.
    High,
}

/// `{"type": "input_audio", "input_audio": {"data": …, "format": …}}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct InputAudioPart {
    /// The audio.
    pub input_audio: InputAudio,
}

/// Base64 audio data and its format.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct InputAudio {
    /// Base64 data.
    pub data: String,
    /// `wav` or `mp3`.
    pub format: InputAudioFormat,
}

/// Format of [`InputAudio`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InputAudioFormat {
    /// `wav`.
    Wav,
    /// `mp3`.
    Mp3,
}

/// A URL that `url::Url::parse` accepts (scheme present; non-empty host for special schemes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Url(String);

impl Url {
    /// The URL text as received.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Url {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        check_url(&s).map_err(D::Error::custom)?;
        Ok(Url(s))
    }
}

/// The checks of `url::Url::parse` that matter for media references.
fn check_url(s: &str) -> Result<(), &'static str> {
    let s = s.trim_matches(|c: char| c <= ' ');
    let colon = s.find(':').ok_or("relative URL without a base")?;
    let scheme = &s[..colon];
    let mut chars = scheme.chars();
    let scheme_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return Err("relative URL without a base");
    }
    let special = ["http", "https", "ws", "wss", "ftp"].iter().any(|x| scheme.eq_ignore_ascii_case(x));
    if special {
        let rest = s[colon + 1..].trim_start_matches(['/', '\\']);
        let authority = rest.split(['/', '\\', '?', '#']).next().unwrap_or("");
        let host_port = authority.rsplit('@').next().unwrap_or("");
        let host = match host_port.rfind(':') {
            Some(i) if !host_port.ends_with(']') => {
                let port = &host_port[i + 1..];
                if !port.is_empty() && port.parse::<u16>().is_err() {
                    return Err("invalid port number");
                }
                &host_port[..i]
            }
            _ => host_port,
        };
        if host.is_empty() {
            return Err("empty host");
        }
    }
    Ok(())
}

/// A UUID in one of the forms `uuid::Uuid` parses (simple, hyphenated, braced, urn).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Uuid(String);

impl<'de> Deserialize<'de> for Uuid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let body =
            s.strip_prefix("urn:uuid:").or_else(|| s.strip_prefix('{').and_then(|b| b.strip_suffix('}'))).unwrap_or(&s);
        let ok = match body.len() {
            32 => body.bytes().all(|b| b.is_ascii_hexdigit()),
            36 => body.bytes().enumerate().all(|(i, b)| match i {
                8 | 13 | 18 | 23 => b == b'-',
                _ => b.is_ascii_hexdigit(),
            }),
            _ => false,
        };
        if !ok {
            return Err(D::Error::custom(format!("invalid UUID: {s}")));
        }
        Ok(Uuid(s))
    }
}

/// Dynamo's media deserializer: `{"url": ""}` means absent; anything else must be the object.
fn optional_media<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    match Option::<Value>::deserialize(d)? {
        None => Ok(None),
        Some(v) if v.get("url").and_then(Value::as_str) == Some("") => Ok(None),
        Some(v) => serde_json::from_value(v).map(Some).map_err(D::Error::custom),
    }
}

pub(super) fn content<'de, W, D>(d: D) -> Result<MessageContent, D::Error>
where
    W: Deserialize<'de> + Into<MessageContent>,
    D: Deserializer<'de>,
{
    W::deserialize(d).map(Into::into)
}

pub(super) fn opt_content<'de, W, D>(d: D) -> Result<Option<MessageContent>, D::Error>
where
    W: Deserialize<'de> + Into<MessageContent>,
    D: Deserializer<'de>,
{
    Option::<W>::deserialize(d).map(|c| c.map(Into::into))
}

/// Declares one role's content wire type: Dynamo's untagged `Text | Array` enum with the
/// role's part enum (both under Dynamo's names, which serde prints in errors), converting into
/// [`MessageContent`].
macro_rules! content_wire {
    ($Wire:ident, $Part:ident { $($V:ident($T:ty)),* $(,)? }) => {
        #[derive(Deserialize)]
        #[serde(untagged)]
        pub(super) enum $Wire {
            Text(String),
            Array(Vec<$Part>),
        }

        #[derive(Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        pub(super) enum $Part {
            $($V($T)),*
        }

        impl From<$Wire> for MessageContent {
            fn from(w: $Wire) -> Self {
                match w {
                    $Wire::Text(s) => MessageContent::Text(s),
                    $Wire::Array(parts) => MessageContent::Parts(
                        parts
                            .into_iter()
                            .map(|p| match p {
                                $($Part::$V(x) => ContentPart::$V(x)),*
                            })
                            .collect(),
                    ),
                }
            }
        }
    };
}

content_wire!(ChatCompletionRequestSystemMessageContent,
    ChatCompletionRequestSystemMessageContentPart { Text(TextPart) });
content_wire!(ChatCompletionRequestDeveloperMessageContent,
    ChatCompletionRequestDeveloperMessageContentPart { Text(TextPart) });
content_wire!(ChatCompletionRequestUserMessageContent,
ChatCompletionRequestUserMessageContentPart {
    Text(TextPart), ImageUrl(ImagePart), VideoUrl(VideoPart), AudioUrl(AudioPart),
    InputAudio(InputAudioPart),
});
content_wire!(ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestAssistantMessageContentPart { Text(TextPart), Refusal(RefusalPart) });
content_wire!(ChatCompletionRequestToolMessageContent,
ChatCompletionRequestToolMessageContentPart {
    Text(TextPart), ImageUrl(ImagePart), VideoUrl(VideoPart), AudioUrl(AudioPart),
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_checks() {
        assert!(check_url("https://example.com/a.png").is_ok());
        assert!(check_url("data:image/png;base64,AAAA").is_ok());
        assert!(check_url("file:///tmp/x.png").is_ok());
        assert_eq!(check_url("not a url"), Err("relative URL without a base"));
        assert_eq!(check_url("http://"), Err("empty host"));
        assert_eq!(check_url("http://h:99999/"), Err("invalid port number"));
        assert!(check_url("http://[::1]/x").is_ok());
    }
}
