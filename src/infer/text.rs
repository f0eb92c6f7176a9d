//! [`Text`]: the text of one delta. Most deltas are one token, a few bytes: those stay
//! inline, so a streamed answer allocates nothing per token for its text. Shard thread.

use smallvec::SmallVec;

/// UTF-8 text, inline up to 24 bytes.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Text(SmallVec<[u8; 24]>);

impl Text {
    pub fn as_str(&self) -> &str {
        // SAFETY: the bytes only ever come from `&str`s (`From<&str>`, `push_str`), appended
        // whole, so they are valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }

    pub fn push_str(&mut self, s: &str) {
        self.0.extend_from_slice(s.as_bytes());
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::ops::Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text(SmallVec::from_slice(s.as_bytes()))
    }
}

impl From<Text> for String {
    fn from(t: Text) -> String {
        t.as_str().to_owned()
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::Text;

    #[test]
    fn short_and_long_text_read_back() {
        let mut t = Text::from("héllo");
        assert_eq!(t.as_str(), "héllo");
        t.push_str(" — a piece longer than the inline room, with 日本語");
        assert_eq!(&*t, "héllo — a piece longer than the inline room, with 日本語");
        assert_eq!(String::from(t), "héllo — a piece longer than the inline room, with 日本語");
        assert!(Text::default().is_empty());
    }
}
