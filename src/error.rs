//! The one error type of switchyard.
//!
//! Every failure that can reach a client is an [`Error`]: a [`Kind`] (what failed), the
//! [`Side`] that caused it (the client, a worker, or switchyard itself), whether a retry is
//! allowed, a message meant for the client and an optional cause meant for the log.
//!
//! The mapping from a kind to an HTTP status and to the error-body dialects lives in
//! exactly one place, [`Kind::status`] / [`Kind::dynamo_type`] / [`Kind::openai_type`] /
//! [`Kind::anthropic_type`], and the body is rendered by [`Error::to_json_body`] (Anthropic's
//! by [`Error::to_anthropic_body`]). The gRPC status code of a kind is
//! [`Kind::grpc_code`], the only place that maps kinds to gRPC. Normal outcomes ("need more bytes", "no model
//! yet") are not errors: callers match on their own enums for those.
//!
//! Error bodies carry Dynamo 1.6.1's flat shape and OpenAI's nested shape in one object:
//!
//! ```json
//! {"message":"Model not found","type":"Not Found","code":404,
//!  "error":{"message":"Model not found","type":"not_found_error","param":null,"code":404}}
//! ```
//!
//! except for 529, which 1.6.1 answers with the flat shape alone
//! (`{"message":"Service temporarily overloaded","type":"Overloaded","code":529}`, compared
//! byte for byte against the real frontend by scripts/interop_kv.sh).

use std::borrow::Cow;
use std::fmt;

/// Who caused a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The request was wrong; retrying it unchanged fails again.
    Client,
    /// A backend worker failed or misbehaved.
    Worker,
    /// Switchyard itself (or its host) failed.
    Internal,
}

/// What failed. Each kind maps to exactly one HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Malformed request line, headers, framing or body (400).
    BadRequest,
    /// No such route, or no such model (404).
    NotFound,
    /// The route exists but not for this method (405).
    MethodNotAllowed,
    /// The header section took too long to arrive (408).
    RequestTimeout,
    /// The body exceeds the configured limit (413).
    PayloadTooLarge,
    /// The route takes JSON and the request said otherwise (415).
    UnsupportedMediaType,
    /// An `Expect` value other than `100-continue` (417).
    ExpectationFailed,
    /// A worker says the caller is not authenticated (401).
    Unauthorized,
    /// A worker says the caller may not do this (403).
    Forbidden,
    /// A worker says the request conflicts with its state (409).
    Conflict,
    /// A worker's rate limit (429).
    TooManyRequests,
    /// A worker cancelled the request (499, nginx's "client closed request", as Dynamo).
    ClientClosed,
    /// A worker broke the protocol (502).
    BadGateway,
    /// A worker's deadline passed (504).
    GatewayTimeout,
    /// Too many header fields or too many header bytes (431).
    HeadersTooLarge,
    /// A feature of the protocol that is not implemented, such as a transfer coding (501).
    NotImplemented,
    /// HTTP version other than 1.0 / 1.1 on the HTTP/1 listener (505).
    VersionNotSupported,
    /// Known model, but no worker is able to take the request now (503).
    ServiceUnavailable,
    /// Every candidate worker is over its busy threshold (529, as Dynamo).
    Overloaded,
    /// Anything else that went wrong on our side (500).
    Internal,
}

impl Kind {
    /// The HTTP status code of this kind.
    pub const fn status(self) -> u16 {
        match self {
            Kind::BadRequest => 400,
            Kind::NotFound => 404,
            Kind::MethodNotAllowed => 405,
            Kind::RequestTimeout => 408,
            Kind::PayloadTooLarge => 413,
            Kind::UnsupportedMediaType => 415,
            Kind::ExpectationFailed => 417,
            Kind::Unauthorized => 401,
            Kind::Forbidden => 403,
            Kind::Conflict => 409,
            Kind::TooManyRequests => 429,
            Kind::ClientClosed => 499,
            Kind::BadGateway => 502,
            Kind::GatewayTimeout => 504,
            Kind::HeadersTooLarge => 431,
            Kind::NotImplemented => 501,
            Kind::VersionNotSupported => 505,
            Kind::ServiceUnavailable => 503,
            Kind::Overloaded => 529,
            Kind::Internal => 500,
        }
    }

    /// The gRPC status code of this kind (the `grpc-status` trailer; codes of
    /// `google.rpc.Code`).
    pub const fn grpc_code(self) -> u8 {
        const CANCELLED: u8 = 1;
        const INVALID_ARGUMENT: u8 = 3;
        const DEADLINE_EXCEEDED: u8 = 4;
        const NOT_FOUND: u8 = 5;
        const PERMISSION_DENIED: u8 = 7;
        const RESOURCE_EXHAUSTED: u8 = 8;
        const ABORTED: u8 = 10;
        const UNIMPLEMENTED: u8 = 12;
        const INTERNAL: u8 = 13;
        const UNAVAILABLE: u8 = 14;
        const UNAUTHENTICATED: u8 = 16;
        match self {
            Kind::BadRequest | Kind::UnsupportedMediaType | Kind::ExpectationFailed => INVALID_ARGUMENT,
            Kind::NotFound => NOT_FOUND,
            Kind::MethodNotAllowed | Kind::NotImplemented | Kind::VersionNotSupported => UNIMPLEMENTED,
            Kind::RequestTimeout | Kind::GatewayTimeout => DEADLINE_EXCEEDED,
            Kind::PayloadTooLarge | Kind::HeadersTooLarge | Kind::TooManyRequests => RESOURCE_EXHAUSTED,
            Kind::ServiceUnavailable | Kind::Overloaded | Kind::BadGateway => UNAVAILABLE,
            Kind::Unauthorized => UNAUTHENTICATED,
            Kind::Forbidden => PERMISSION_DENIED,
            Kind::Conflict => ABORTED,
            Kind::ClientClosed => CANCELLED,
            Kind::Internal => INTERNAL,
        }
    }

    /// The `type` of Dynamo's flat error shape (the HTTP reason phrase, as 1.6.1 sends it).
    pub const fn dynamo_type(self) -> &'static str {
        match self {
            Kind::BadRequest => "Bad Request",
            Kind::NotFound => "Not Found",
            Kind::MethodNotAllowed => "Method Not Allowed",
            Kind::RequestTimeout => "Request Timeout",
            Kind::PayloadTooLarge => "Payload Too Large",
            Kind::UnsupportedMediaType => "Unsupported Media Type",
            Kind::ExpectationFailed => "Expectation Failed",
            Kind::Unauthorized => "Unauthorized",
            Kind::Forbidden => "Forbidden",
            Kind::Conflict => "Conflict",
            Kind::TooManyRequests => "Too Many Requests",
            Kind::ClientClosed => "Client Closed Request",
            Kind::BadGateway => "Bad Gateway",
            Kind::GatewayTimeout => "Gateway Timeout",
            Kind::HeadersTooLarge => "Request Header Fields Too Large",
            Kind::NotImplemented => "Not Implemented",
            Kind::VersionNotSupported => "HTTP Version Not Supported",
            Kind::ServiceUnavailable => "Service Unavailable",
            Kind::Overloaded => "Overloaded",
            Kind::Internal => "Internal Server Error",
        }
    }

    /// The `type` of OpenAI's nested error shape.
    pub const fn openai_type(self) -> &'static str {
        match self {
            Kind::BadRequest
            | Kind::PayloadTooLarge
            | Kind::UnsupportedMediaType
            | Kind::ExpectationFailed
            | Kind::HeadersTooLarge
            | Kind::VersionNotSupported
            | Kind::Conflict => "invalid_request_error",
            Kind::NotFound => "not_found_error",
            Kind::MethodNotAllowed => "method_not_allowed",
            Kind::RequestTimeout | Kind::GatewayTimeout => "timeout_error",
            Kind::NotImplemented => "not_implemented",
            Kind::ServiceUnavailable => "service_unavailable",
            Kind::Overloaded => "overloaded",
            Kind::Unauthorized => "authentication_error",
            Kind::Forbidden => "permission_error",
            Kind::TooManyRequests => "rate_limit_error",
            Kind::ClientClosed => "request_cancelled",
            Kind::BadGateway | Kind::Internal => "internal_server_error",
        }
    }

    /// The `type` of an OpenAI error event inside a stream that already started, as Dynamo
    /// 1.6.1 writes it (it differs from [`Kind::openai_type`] for 501 and 529).
    pub const fn openai_stream_type(self) -> &'static str {
        match self {
            Kind::NotImplemented => "not_implemented_error",
            Kind::Overloaded => "service_unavailable",
            k => k.openai_type(),
        }
    }

    /// The `error.type` of Anthropic's error shape
    /// (`{"type":"error","error":{"type":…,"message":…}}`).
    pub const fn anthropic_type(self) -> &'static str {
        match self {
            Kind::NotFound => "not_found_error",
            Kind::Unauthorized => "authentication_error",
            Kind::Forbidden => "permission_error",
            Kind::TooManyRequests => "rate_limit_error",
            Kind::PayloadTooLarge => "request_too_large",
            Kind::RequestTimeout | Kind::GatewayTimeout => "timeout_error",
            Kind::ServiceUnavailable | Kind::Overloaded => "overloaded_error",
            Kind::Internal | Kind::BadGateway | Kind::ClientClosed => "api_error",
            Kind::BadRequest
            | Kind::MethodNotAllowed
            | Kind::UnsupportedMediaType
            | Kind::ExpectationFailed
            | Kind::HeadersTooLarge
            | Kind::NotImplemented
            | Kind::VersionNotSupported
            | Kind::Conflict => "invalid_request_error",
        }
    }

    /// Who is at fault for this kind, unless the constructor says otherwise.
    pub const fn default_side(self) -> Side {
        match self {
            Kind::ServiceUnavailable
            | Kind::Overloaded
            | Kind::Unauthorized
            | Kind::Forbidden
            | Kind::Conflict
            | Kind::TooManyRequests
            | Kind::ClientClosed
            | Kind::BadGateway
            | Kind::GatewayTimeout => Side::Worker,
            Kind::Internal => Side::Internal,
            _ => Side::Client,
        }
    }
}

/// A failure with its kind, side, retry bit, client message and optional cause.
pub struct Error {
    kind: Kind,
    side: Side,
    retry: bool,
    message: Cow<'static, str>,
    cause: Option<Box<dyn std::error::Error + Send + Sync>>,
    /// What an overload refusal adds for the client (a policy class's limit: 1.6.1's
    /// `details`).
    details: Option<Box<serde_json::Value>>,
}

impl Error {
    /// A new error of `kind` with a message for the client.
    pub fn new(kind: Kind, message: impl Into<Cow<'static, str>>) -> Self {
        Error {
            kind,
            side: kind.default_side(),
            retry: matches!(kind, Kind::ServiceUnavailable | Kind::Overloaded),
            message: message.into(),
            cause: None,
            details: None,
        }
    }

    /// The drain ended while the request was still being answered, or it came in during
    /// the drain (503, as 1.6.1 answers then).
    pub fn shutting_down() -> Self {
        Error::new(Kind::ServiceUnavailable, "Service is shutting down")
    }

    /// Something went wrong on our side (or a worker broke the protocol in a way no client
    /// can act on): 500 `Internal server error`, with `cause` kept for the log only.
    pub fn internal(cause: impl Into<String>) -> Self {
        Error::new(Kind::Internal, "Internal server error").with_cause(std::io::Error::other(cause.into()))
    }

    /// Attach the underlying cause (logged, never sent to the client).
    pub fn with_cause(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.cause = Some(Box::new(cause));
        self
    }

    /// Override who caused the failure.
    pub fn with_side(mut self, side: Side) -> Self {
        self.side = side;
        self
    }

    /// Override whether a retry (on another worker, or by the client) is allowed.
    pub fn with_retry(mut self, retry: bool) -> Self {
        self.retry = retry;
        self
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }
    pub fn side(&self) -> Side {
        self.side
    }
    pub fn retry(&self) -> bool {
        self.retry
    }
    /// With `details` in the body (an overload refusal's).
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    pub fn details(&self) -> Option<&serde_json::Value> {
        self.details.as_deref()
    }

    pub fn message(&self) -> &str {
        &self.message
    }
    pub fn status(&self) -> u16 {
        self.kind.status()
    }

    /// The error body: Dynamo's flat fields and OpenAI's nested `error` in one object (the
    /// flat fields alone for 529, as 1.6.1).
    pub fn to_json_body(&self) -> Vec<u8> {
        let code = self.kind.status();
        if self.kind == Kind::Overloaded {
            let mut flat = serde_json::json!({"message": self.message, "type": self.kind.dynamo_type(), "code": code});
            if let Some(d) = &self.details {
                flat["details"] = (**d).clone();
            }
            return serde_json::to_vec(&flat).unwrap_or_else(|_| b"{}".to_vec());
        }
        let body = serde_json::json!({
            "message": self.message,
            "type": self.kind.dynamo_type(),
            "code": code,
            "error": {
                "message": self.message,
                "type": self.kind.openai_type(),
                "param": null,
                "code": code,
            }
        });
        serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec())
    }
}

impl Error {
    /// The error in Anthropic's shape: `{"type":"error","error":{"type":…,"message":…}}`.
    pub fn to_anthropic_body(&self) -> Vec<u8> {
        let body = serde_json::json!({
            "type": "error",
            "error": {"type": self.kind.anthropic_type(), "message": self.message},
        });
        serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("side", &self.side)
            .field("retry", &self.retry)
            .field("message", &self.message)
            .field("cause", &self.cause.as_ref().map(|c| c.to_string()))
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.kind.dynamo_type(), self.kind.status(), self.message)?;
        if let Some(cause) = &self.cause {
            write!(f, ": {cause}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_ref().map(|c| c.as_ref() as &(dyn std::error::Error + 'static))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_flat_and_nested_shapes() {
        let e = Error::new(Kind::NotFound, "Model not found");
        let v: serde_json::Value = serde_json::from_slice(&e.to_json_body()).unwrap();
        assert_eq!(v["message"], "Model not found");
        assert_eq!(v["type"], "Not Found");
        assert_eq!(v["code"], 404);
        assert_eq!(v["error"]["message"], "Model not found");
        assert_eq!(v["error"]["type"], "not_found_error");
        assert_eq!(v["error"]["param"], serde_json::Value::Null);
        assert_eq!(v["error"]["code"], 404);
    }

    #[test]
    fn sides_and_retry_defaults() {
        assert_eq!(Error::new(Kind::BadRequest, "x").side(), Side::Client);
        assert!(!Error::new(Kind::BadRequest, "x").retry());
        assert!(Error::new(Kind::Overloaded, "x").retry());
        let flat: serde_json::Value =
            serde_json::from_slice(&Error::new(Kind::Overloaded, "Service temporarily overloaded").to_json_body())
                .unwrap();
        assert_eq!(
            flat,
            serde_json::json!({"message":"Service temporarily overloaded","type":"Overloaded","code":529})
        );
        assert_eq!(Kind::Overloaded.status(), 529);
    }

    #[test]
    fn grpc_codes() {
        assert_eq!(Kind::NotFound.grpc_code(), 5);
        assert_eq!(Kind::BadRequest.grpc_code(), 3);
        assert_eq!(Kind::PayloadTooLarge.grpc_code(), 8);
        assert_eq!(Kind::ServiceUnavailable.grpc_code(), 14);
        assert_eq!(Kind::Internal.grpc_code(), 13);
        assert_eq!(Kind::NotImplemented.grpc_code(), 12);
    }
}
