//! the JSON type of each argument it declares one for. Checked where the call is made (a
//! script's engine, before the call leaves it) and where it is admitted (the pipeline, before
//! an approval is asked for a call that cannot run); the upstream checks the rest itself.

use crate::{Map, Value};

/// Checks the top-level types a JSON Schema states (the server validates again).
pub fn check_schema(
    name: &str,
    schema: &serde_json::Map<String, serde_json::Value>,
    map: &Map,
) -> Result<(), String> {
    let properties = schema.get("properties").and_then(|p| p.as_object());
    for required in schema
        .get("required")
        .and_then(|r| r.as_array())
        .into_iter()
        .flatten()
    {
        if let Some(required) = required.as_str()
            && !map.contains_key(required)
        {
            return Err(format!(
                "{name}() is missing the required argument `{required}`"
            ));
        }
    }
    for (key, value) in map {
        let Some(property) = properties.and_then(|p| p.get(key)) else {
            if schema.get("additionalProperties") == Some(&serde_json::Value::Bool(false)) {
                return Err(format!(
                    "{name}() got an unexpected keyword argument `{key}`"
                ));
            }
            continue;
        };
        let types: Vec<&str> = match property.get("type") {
            Some(serde_json::Value::String(t)) => vec![t.as_str()],
            Some(serde_json::Value::Array(ts)) => ts.iter().filter_map(|t| t.as_str()).collect(),
            _ => continue,
        };
        let fits = types.iter().any(|t| {
            matches!(
                (*t, value),
                ("string", Value::Str(_))
                    | ("boolean", Value::Bool(_))
                    | ("null", Value::Null)
                    | ("integer", Value::Int(_))
                    | ("number", Value::Int(_) | Value::Float(_))
                    | ("array", Value::List(_))
                    | ("object", Value::Map(_))
            )
        });
        if !fits {
            return Err(format!(
                "{name}(): argument `{key}` must be {}, got {}",
                types.join(" or "),
                value.type_name()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_closed_and_typed_arguments_are_checked_and_nothing_else() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": ["integer", "null"]},
                "free": {},
            },
            "required": ["city"],
            "additionalProperties": false,
        });
        let schema = schema.as_object().unwrap();
        let map = |pairs: &[(&str, Value)]| -> Map {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect()
        };
        for (arguments, says) in [
            (
                map(&[("cityy", Value::from("Oslo"))]),
                "missing the required argument `city`",
            ),
            (map(&[]), "missing the required argument `city`"),
            (
                map(&[("city", Value::Int(5))]),
                "`city` must be string, got int",
            ),
            (
                map(&[("city", Value::from("Oslo")), ("days", Value::from("2"))]),
                "`days` must be integer or null",
            ),
            (
                map(&[("city", Value::from("Oslo")), ("extra", Value::Int(1))]),
                "unexpected keyword argument `extra`",
            ),
        ] {
            let error = check_schema("weather__forecast", schema, &arguments).unwrap_err();
            assert!(error.contains(says), "{arguments:?}: {error}");
        }
        for fine in [
            map(&[("city", Value::from("Oslo"))]),
            map(&[("city", Value::from("Oslo")), ("days", Value::Null)]),
            map(&[("city", Value::from("Oslo")), ("free", Value::List(vec![]))]),
        ] {
            assert_eq!(check_schema("weather__forecast", schema, &fine), Ok(()));
        }
        // An open schema takes keys it does not name.
        let open = serde_json::json!({"properties": {}});
        let extra = map(&[("anything", Value::Int(1))]);
        assert_eq!(check_schema("t", open.as_object().unwrap(), &extra), Ok(()));
    }
}
