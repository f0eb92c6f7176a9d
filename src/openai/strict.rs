//! Strict function schemas: a tool declared with `"strict": true` must give `parameters` in
//! the subset of JSON Schema that strict structured output supports, checked as Dynamo
//! 1.6.1 checks it (400 `Validation: Invalid schema for function '<name>': In
//! context=#<pointer>, <rule>`).
//!
//! The schema is walked breadth first, map keys in sorted order, so the first rule broken
//! is the same whatever order the client wrote the keys in. Rules:
//! * every subschema is an object or a boolean; keywords strict mode leaves out (`allOf`,
//!   `oneOf`, `not`, conditionals, …) and dynamic references are refused;
//! * keyword shapes: known `type` names, unique-string `required`, array `enum`, string
//!   `$ref`/`pattern`/`format`, numeric bounds, non-negative integer counts;
//! * an object schema closes itself (`additionalProperties: false`) and requires every
//!   property it declares, and nothing it does not; at most 10 levels of objects;
//! * budgets: 5,000 properties, 1,000 enum values, 120,000 characters of names and values,
//!   15,000 characters in a large (more than 250) all-string enum;
//! * references are document-local JSON pointers to a schema location, without cycles; an
//!   object `$ref` left open locally must reach a target that closes it; the root is an
//!   object (possibly through references) and not an `anyOf`.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

/// Keywords strict schemas may not use.
const UNSUPPORTED: &[&str] = &[
    "allOf",
    "oneOf",
    "not",
    "dependentRequired",
    "dependentSchemas",
    "if",
    "then",
    "else",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedItems",
];
const TYPES: &[&str] = &["null", "boolean", "object", "array", "number", "integer", "string"];
const MAX_OBJECT_DEPTH: usize = 10;
/// Longest identifier quoted in a message (longer ones end in `...`).
const MAX_QUOTED: usize = 256;

/// Checks a strict function's parameters; `Ok` for functions that are not strict.
pub fn check_function(name: &str, strict: Option<bool>, parameters: Option<&Value>) -> Result<(), String> {
    let (Some(true), Some(schema)) = (strict, parameters) else { return Ok(()) };
    check(schema).map_err(|e| {
        format!("Invalid schema for function '{}': {e}", quoted(name, super::validate::MAX_FUNCTION_NAME_LENGTH))
    })
}

fn quoted(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_string(),
    }
}

fn at(path: &str, rule: impl std::fmt::Display) -> String {
    format!("In context=#{}, {rule}", quoted(path, MAX_QUOTED))
}

/// `path` extended by one JSON-pointer token.
fn child(path: &str, key: &str) -> String {
    format!("{path}/{}", key.replace('~', "~0").replace('/', "~1"))
}

fn sorted(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut v: Vec<_> = map.iter().collect();
    v.sort_unstable_by(|a, b| a.0.cmp(b.0));
    v
}

fn unique_strings<'a>(value: &'a Value, path: &str) -> Result<HashSet<&'a str>, String> {
    let bad = || at(path, "must be an array of unique strings");
    let mut out = HashSet::new();
    for v in value.as_array().ok_or_else(bad)? {
        if !out.insert(v.as_str().ok_or_else(bad)?) {
            return Err(bad());
        }
    }
    Ok(out)
}

/// One subschema found by the walk.
struct Node<'a> {
    path: String,
    value: &'a Value,
    /// Object schemas above it.
    depth: usize,
}

#[derive(Default)]
struct Budgets {
    properties: usize,
    enums: usize,
    characters: usize,
}

fn check(root: &Value) -> Result<(), String> {
    let mut nodes = vec![Node { path: String::new(), value: root, depth: 0 }];
    let mut budgets = Budgets::default();
    let mut nested_id: Option<String> = None;
    let mut refs: Vec<(usize, &str)> = Vec::new();
    let mut i = 0;
    while i < nodes.len() {
        let (path, value, depth) = (nodes[i].path.clone(), nodes[i].value, nodes[i].depth);
        let index = i;
        i += 1;
        if value.is_boolean() {
            continue;
        }
        let schema = value.as_object().ok_or_else(|| at(&path, "schema must be an object or boolean"))?;
        if let Some(k) = UNSUPPORTED.iter().find(|k| schema.contains_key(**k)) {
            return Err(at(&child(&path, k), "keyword is not supported in strict schemas"));
        }
        if let Some(k) = ["$dynamicRef", "$recursiveRef"].iter().find(|k| schema.contains_key(**k)) {
            return Err(at(&child(&path, k), "Dynamo does not support this reference mechanism"));
        }
        if !path.is_empty() && (schema.contains_key("$id") || schema.contains_key("id")) && nested_id.is_none() {
            nested_id = Some(path.clone());
        }
        shapes(schema, &path)?;
        let object = is_object(schema);
        if object && depth > MAX_OBJECT_DEPTH {
            return Err(at(&path, format!("exceeds {MAX_OBJECT_DEPTH} levels of object nesting")));
        }
        let below = depth + usize::from(object);
        closed_object(schema, &path)?;
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            refs.push((index, r));
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            budgets.enums += values.len();
            let chars: usize = values.iter().filter_map(Value::as_str).map(|s| s.chars().count()).sum();
            budgets.characters += chars;
            if values.len() > 250 && values.iter().all(Value::is_string) && chars > 15_000 {
                return Err(at(
                    &child(&path, "enum"),
                    "exceeds 15000 characters in an all-string enum with more than 250 entries",
                ));
            }
        }
        if let Some(c) = schema.get("const").and_then(Value::as_str) {
            budgets.characters += c.chars().count();
        }
        for keyword in ["properties", "patternProperties", "$defs", "definitions"] {
            let Some(v) = schema.get(keyword) else { continue };
            let location = child(&path, keyword);
            let map = v.as_object().ok_or_else(|| at(&location, "must be a map of schemas"))?;
            if keyword == "properties" {
                budgets.properties += map.len();
            }
            for (name, v) in sorted(map) {
                if keyword != "patternProperties" {
                    budgets.characters += name.chars().count();
                }
                nodes.push(Node { path: child(&location, name), value: v, depth: below });
            }
        }
        for keyword in ["anyOf", "prefixItems", "items"] {
            let Some(v) = schema.get(keyword) else { continue };
            let location = child(&path, keyword);
            if keyword == "items" && !v.is_array() {
                nodes.push(Node { path: location, value: v, depth: below });
                continue;
            }
            let list = v
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| at(&location, "must be a nonempty array of schemas"))?;
            for (n, v) in list.iter().enumerate() {
                nodes.push(Node { path: child(&location, &n.to_string()), value: v, depth: below });
            }
        }
        for keyword in
            ["additionalProperties", "additionalItems", "propertyNames", "unevaluatedProperties", "contentSchema"]
        {
            if let Some(v) = schema.get(keyword) {
                nodes.push(Node { path: child(&path, keyword), value: v, depth: below });
            }
        }
        if let Some(v) = schema.get("dependencies") {
            let location = child(&path, "dependencies");
            let map =
                v.as_object().ok_or_else(|| at(&location, "must be a map of schemas or property dependencies"))?;
            for (name, v) in sorted(map) {
                let location = child(&location, name);
                if v.is_array() {
                    unique_strings(v, &location)?;
                } else {
                    nodes.push(Node { path: location, value: v, depth: below });
                }
            }
        }
        for (count, limit, what) in [
            (budgets.properties, 5_000, "declared properties"),
            (budgets.enums, 1_000, "enum entries"),
            (budgets.characters, 120_000, "name and value characters"),
        ] {
            if count > limit {
                return Err(at(&path, format!("exceeds {limit} {what}")));
            }
        }
    }
    if let (false, Some(path)) = (refs.is_empty(), nested_id) {
        return Err(at(&path, "Dynamo does not support references with nested identifier scopes"));
    }
    let by_path: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.path.as_str(), i)).collect();
    let mut targets: Vec<Option<usize>> = vec![None; nodes.len()];
    for (index, reference) in refs {
        let path = child(&nodes[index].path, "$ref");
        let pointer = local_pointer(reference, &path)?;
        if root.pointer(&pointer).is_none() {
            return Err(at(&path, "reference target does not exist"));
        }
        let target = by_path
            .get(pointer.as_str())
            .ok_or_else(|| at(&path, "reference target is not a recognized schema location"))?;
        targets[index] = Some(*target);
    }
    no_cycles(&nodes, &targets)?;
    references_close(&nodes, &targets)?;
    object_root(&nodes, &targets)
}

fn shapes(schema: &Map<String, Value>, path: &str) -> Result<(), String> {
    if let Some(v) = schema.get("type") {
        let location = child(path, "type");
        let ok = match v.as_str() {
            Some(name) => TYPES.contains(&name),
            None => {
                let names = unique_strings(v, &location)?;
                !names.is_empty() && names.iter().all(|n| TYPES.contains(n))
            }
        };
        if !ok {
            return Err(at(&location, "must contain recognized, unique JSON Schema type names"));
        }
    }
    if let Some(v) = schema.get("required") {
        unique_strings(v, &child(path, "required"))?;
    }
    if schema.get("enum").is_some_and(|v| !v.is_array()) {
        return Err(at(&child(path, "enum"), "must be an array"));
    }
    for k in ["$ref", "pattern", "format"] {
        if schema.get(k).is_some_and(|v| !v.is_string()) {
            return Err(at(&child(path, k), "must be a string"));
        }
    }
    for k in ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"] {
        if let Some(v) = schema.get(k) {
            if !v.is_number() {
                return Err(at(&child(path, k), "must be numeric"));
            }
            if k == "multipleOf" && !v.as_f64().is_some_and(|n| n > 0.0) {
                return Err(at(&child(path, k), "must be positive"));
            }
        }
    }
    for k in ["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"] {
        if schema.get(k).is_some_and(|v| !v.as_f64().is_some_and(|n| n >= 0.0 && n.fract() == 0.0)) {
            return Err(at(&child(path, k), "must be a nonnegative integer"));
        }
    }
    Ok(())
}

fn declares_properties(schema: &Map<String, Value>) -> bool {
    schema.contains_key("properties") || schema.contains_key("patternProperties")
}

fn is_object(schema: &Map<String, Value>) -> bool {
    let typed = schema
        .get("type")
        .is_some_and(|t| t == "object" || t.as_array().is_some_and(|a| a.iter().any(|x| x == "object")));
    typed || declares_properties(schema)
}

/// Constraints an object schema states itself (as opposed to through its `$ref`).
fn own_constraints(schema: &Map<String, Value>) -> bool {
    declares_properties(schema) || schema.contains_key("required") || schema.contains_key("additionalProperties")
}

fn closed_object(schema: &Map<String, Value>, path: &str) -> Result<(), String> {
    let applies = if schema.contains_key("$ref") { own_constraints(schema) } else { is_object(schema) };
    if !applies {
        return Ok(());
    }
    if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
        return Err(at(path, "object schemas require additionalProperties: false"));
    }
    let map_of = |k: &str| -> Result<Option<&Map<String, Value>>, String> {
        schema.get(k).map(|v| v.as_object().ok_or_else(|| at(&child(path, k), "must be a map of schemas"))).transpose()
    };
    let properties = map_of("properties")?;
    let patterns = map_of("patternProperties")?;
    let required = match schema.get("required") {
        Some(v) => unique_strings(v, &child(path, "required"))?,
        None => HashSet::new(),
    };
    if let Some(p) = properties {
        if let Some((name, _)) = sorted(p).into_iter().find(|(n, _)| !required.contains(n.as_str())) {
            return Err(at(&child(path, "required"), format!("must include property '{}'", quoted(name, MAX_QUOTED))));
        }
    }
    if patterns.is_none_or(Map::is_empty) {
        let mut unknown: Vec<&&str> =
            required.iter().filter(|n| !properties.is_some_and(|p| p.contains_key(**n))).collect();
        unknown.sort_unstable();
        if let Some(name) = unknown.first() {
            return Err(at(
                &child(path, "required"),
                format!("unknown property '{}' in a closed object", quoted(name, MAX_QUOTED)),
            ));
        }
    }
    Ok(())
}

/// The JSON pointer a document-local reference (`#/…`, percent-encoded) names.
fn local_pointer(reference: &str, path: &str) -> Result<String, String> {
    let fragment =
        reference.strip_prefix('#').ok_or_else(|| at(path, "Dynamo supports only document-local references"))?;
    let bytes = fragment.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
            let Some(hex) = hex else { return Err(at(path, "invalid URI-fragment escape")) };
            decoded.push(u8::from_str_radix(hex, 16).unwrap_or(0));
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    let pointer = String::from_utf8(decoded).map_err(|_| at(path, "reference fragment must decode to UTF-8"))?;
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err(at(path, "Dynamo does not support named-anchor references"));
    }
    let mut chars = pointer.bytes();
    while let Some(b) = chars.next() {
        if b == b'~' && !matches!(chars.next(), Some(b'0' | b'1')) {
            return Err(at(path, "invalid JSON Pointer escape"));
        }
    }
    Ok(pointer)
}

/// No chain of direct `$ref` edges comes back to where it started.
fn no_cycles(nodes: &[Node<'_>], targets: &[Option<usize>]) -> Result<(), String> {
    let mut done = HashSet::new();
    for start in 0..nodes.len() {
        let mut chain = HashSet::new();
        let mut current = start;
        while !done.contains(&current) {
            if !chain.insert(current) {
                return Err(at(&nodes[current].path, "Dynamo does not support direct reference cycles"));
            }
            match targets[current] {
                Some(t) => current = t,
                None => break,
            }
        }
        done.extend(chain);
        done.insert(current);
    }
    Ok(())
}

/// An object `$ref` without constraints of its own reaches a target that closes the object.
fn references_close(nodes: &[Node<'_>], targets: &[Option<usize>]) -> Result<(), String> {
    let mut known: Vec<Option<bool>> = vec![None; nodes.len()];
    for (index, node) in nodes.iter().enumerate() {
        let Some(schema) = node.value.as_object() else { continue };
        if targets[index].is_none() || !is_object(schema) || own_constraints(schema) {
            continue;
        }
        let mut chain = Vec::new();
        let mut current = index;
        let closed = loop {
            if let Some(k) = known[current] {
                break k;
            }
            chain.push(current);
            let s = nodes[current].value;
            if s.as_object().is_some_and(own_constraints) {
                break s.get("additionalProperties") == Some(&Value::Bool(false));
            }
            match targets[current] {
                Some(t) => current = t,
                None => break false,
            }
        };
        for c in chain {
            known[c] = Some(closed);
        }
        if !closed {
            return Err(at(&node.path, "reference target must close the object with additionalProperties: false"));
        }
    }
    Ok(())
}

/// The root (following its references) has an object-only type and is no `anyOf`.
fn object_root(nodes: &[Node<'_>], targets: &[Option<usize>]) -> Result<(), String> {
    let (mut current, mut seen, mut object) = (0, HashSet::new(), false);
    while seen.insert(current) {
        let node = &nodes[current];
        if node.value.get("anyOf").is_some() {
            return Err(at(&node.path, "root must not use anyOf"));
        }
        if let Some(t) = node.value.get("type") {
            let object_only = t == "object" || t.as_array().is_some_and(|a| a.len() == 1 && a[0] == "object");
            if !object_only {
                return Err(at(&node.path, "root must have object-only type"));
            }
            object = true;
        }
        match targets[current] {
            Some(t) => current = t,
            None => break,
        }
    }
    if !object {
        return Err(at(
            "",
            "unsupported root representation: Dynamo requires an object-only type or local-reference chain",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(schema: Value) -> String {
        check_function("search", Some(true), Some(&schema)).unwrap_err()
    }

    fn closed(props: Value, required: Value) -> Value {
        json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
    }

    #[test]
    fn only_strict_functions_with_parameters_are_checked() {
        assert!(check_function("f", None, Some(&json!({}))).is_ok());
        assert!(check_function("f", Some(false), Some(&json!({}))).is_ok());
        assert!(check_function("f", Some(true), None).is_ok());
        assert!(check_function("f", Some(true), Some(&json!({}))).is_err());
    }

    #[test]
    fn objects_must_close_and_require_every_property() {
        assert_eq!(
            err(json!({"type": "object", "properties": {"city": {"type": "string"}}})),
            "Invalid schema for function 'search': In context=#, object schemas require additionalProperties: false"
        );
        assert_eq!(
            err(closed(json!({"a": {"type": "string"}, "b": {"type": "string"}}), json!(["b"]))),
            "Invalid schema for function 'search': In context=#/required, must include property 'a'"
        );
        assert!(err(closed(json!({}), json!(["x"]))).ends_with("unknown property 'x' in a closed object"));
        let nested = closed(json!({"a~b/c": {"type": "object"}}), json!(["a~b/c"]));
        assert!(err(nested).contains("In context=#/properties/a~0b~1c, object schemas"));
        assert!(check_function("f", Some(true), Some(&closed(json!({"x": {"type": "integer"}}), json!(["x"])))).is_ok());
    }

    #[test]
    fn keywords_shapes_and_root() {
        assert!(err(json!({"type": "object", "additionalProperties": false, "oneOf": []}))
            .contains("#/oneOf, keyword is not supported"));
        assert!(err(json!({"type": "object", "additionalProperties": false, "minProperties": -1}))
            .contains("must be a nonnegative integer"));
        assert!(err(json!({"type": "string"})).contains("root must have object-only type"));
        assert!(err(json!({"type": "objekt"})).contains("recognized, unique JSON Schema type names"));
    }

    #[test]
    fn references() {
        let ok = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/X"}}, "required": ["x"],
            "additionalProperties": false, "$defs": {"X": {"type": "string"}}});
        assert!(check_function("f", Some(true), Some(&ok)).is_ok());
        let missing = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/Y"}}, "required": ["x"], "additionalProperties": false});
        assert!(err(missing).contains("reference target does not exist"));
        let remote = json!({"type": "object", "properties": {"x": {"$ref": "http://x"}}, "required": ["x"], "additionalProperties": false});
        assert!(err(remote).contains("only document-local references"));
    }
}
