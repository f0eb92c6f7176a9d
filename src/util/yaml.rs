//! YAML documents (a kubeconfig, `--router-policy-config`) read into `serde_json::Value`, so
//! the rest of the code handles one tree type. Runs at start-up or on the discovery thread.

use serde_json::{Map, Number, Value};
use yaml_rust2::{Yaml, YamlLoader};

/// The first document of `text` as JSON; an empty text is `null`. Map keys that are not
/// strings are written as their scalar text; aliases are resolved by the loader.
pub fn parse(text: &str) -> Result<Value, String> {
    let docs = YamlLoader::load_from_str(text).map_err(|e| e.to_string())?;
    Ok(docs.into_iter().next().map_or(Value::Null, to_json))
}

fn to_json(y: Yaml) -> Value {
    match y {
        Yaml::Null | Yaml::BadValue => Value::Null,
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Integer(i) => Value::Number(i.into()),
        Yaml::Real(r) => r.parse::<f64>().ok().and_then(Number::from_f64).map_or(Value::String(r), Value::Number),
        Yaml::String(s) => Value::String(s),
        Yaml::Array(a) => Value::Array(a.into_iter().map(to_json).collect()),
        Yaml::Hash(h) => {
            let mut m = Map::new();
            for (k, v) in h {
                let key = match k {
                    Yaml::String(s) | Yaml::Real(s) => s,
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    Yaml::Null => "null".to_string(),
                    other => format!("{other:?}"),
                };
                m.insert(key, to_json(v));
            }
            Value::Object(m)
        }
        Yaml::Alias(_) => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kubeconfig_shapes_and_scalars() {
        let v = parse(
            "apiVersion: v1\nclusters:\n- cluster:\n    server: http://127.0.0.1:6443\n    insecure-skip-tls-verify: true\n  name: c\nratio: 0.75\nn: 3\nempty:\nq: \"3\"\n",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1",
                   "clusters": [{"cluster": {"server": "http://127.0.0.1:6443", "insecure-skip-tls-verify": true}, "name": "c"}],
                   "ratio": 0.75, "n": 3, "empty": null, "q": "3"})
        );
        assert_eq!(parse("").unwrap(), Value::Null);
        assert_eq!(parse("{\"a\": [1, 2]}").unwrap(), json!({"a": [1, 2]}), "JSON is YAML");
        assert!(parse("a: [1, 2").is_err());
    }
}
