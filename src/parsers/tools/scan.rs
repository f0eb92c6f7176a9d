//! Scanning helpers of the tool parsers: where a bracketed value ends (JSON and Python
//! literals), markers held back at the end of a piece, names.

/// The end (exclusive) of the JSON object or array that `s` starts with, strings and escapes
/// respected; `None` while it is not closed yet.
pub fn json_end(s: &str) -> Option<usize> {
    bracket_end(s, false)
}

/// [`json_end`] for a Python literal (strings in `'` or `"`, brackets of three kinds).
pub fn python_end(s: &str) -> Option<usize> {
    bracket_end(s, true)
}

fn bracket_end(s: &str, python: bool) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == q {
                quote = None;
            }
            continue;
        }
        match b {
            b'"' => quote = Some(b'"'),
            b'\'' if python => quote = Some(b'\''),
            b'{' | b'[' => depth += 1,
            b'(' if python => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            b')' if python => depth = depth.checked_sub(1)?,
            _ => {}
        }
    }
    None
}

/// The end (exclusive) of the JSON string that `s` starts with; `None` while it is open.
pub fn string_end(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate().skip(1) {
        match (escaped, b) {
            (true, _) => escaped = false,
            (false, b'\\') => escaped = true,
            (false, b'"') => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// The longest tail of `text` that could begin any of `markers` (held back until the next
/// piece shows whether it does).
pub fn held_tail(text: &str, markers: &[&str]) -> usize {
    markers.iter().map(|m| super::super::reasoning::partial_tail(text, m)).max().unwrap_or(0)
}

/// The first of `markers` in `s`: its position and the marker.
pub fn first_of<'m>(s: &str, markers: &[&'m str]) -> Option<(usize, &'m str)> {
    markers.iter().filter(|m| !m.is_empty()).filter_map(|m| s.find(m).map(|at| (at, *m))).min_by_key(|(at, _)| *at)
}

/// Whether `name` can be a function's name (what a model's format left between its markers).
pub fn is_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:/".contains(&b))
}

/// Whether `s` is a proper prefix of one of `markers` (more text may complete it).
pub fn prefix_of_any(s: &str, markers: &[&str]) -> bool {
    markers.iter().any(|m| m.len() > s.len() && m.starts_with(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brackets_close_where_the_value_ends() {
        assert_eq!(json_end(r#"{"a": "}"} tail"#), Some(10));
        assert_eq!(json_end(r#"[{"a": "\"]"}]x"#), Some(14));
        assert_eq!(json_end(r#"{"a": {"#), None);
        assert_eq!(python_end("[f(a='])'), g(b=(1, 2))] rest"), Some(24));
    }
}
