//! Mends two shapes the schema derive writes that no value can satisfy, so that a client
//! validating against `/openapi.json` accepts what the server accepts and answers.
//!
//! - A described field whose schema is inlined becomes `allOf: [schema, {"type": "object",
//!   "description": …}]`: a timestamp would have to be an object too. The description moves to
//!   the `allOf` and the object goes.
//! - A flattened `Option` of a struct becomes an `allOf` item `oneOf: [struct, {"type":
//!   "null"}]`: the row it flattens into is an object, never null, so every row would have to
//!   carry the struct's fields. It becomes `anyOf: [struct, {"type": "object"}]`: the fields,
//!   when present, are the struct's.

use serde_json::{Map, Value};

/// `document` with both shapes mended, wherever they are.
pub(crate) fn mended(mut document: Value) -> Value {
    mend(&mut document);
    document
}

fn mend(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if let Some(Value::Array(items)) = object.get_mut("allOf") {
                let description = take_description_items(items);
                items.iter_mut().for_each(absent_when_null);
                if let Some(description) = description {
                    object
                        .entry("description")
                        .or_insert(Value::String(description));
                }
            }
            object.values_mut().for_each(mend);
        }
        Value::Array(items) => items.iter_mut().for_each(mend),
        _ => {}
    }
}

/// Removes the items that only describe (an object type and a description, nothing else) and
/// returns the first one's description.
fn take_description_items(items: &mut Vec<Value>) -> Option<String> {
    let mut description = None;
    items.retain(|item| match only_describes(item) {
        Some(text) => {
            description.get_or_insert_with(|| text.to_owned());
            false
        }
        None => true,
    });
    description
}

fn only_describes(item: &Value) -> Option<&str> {
    let object = item.as_object()?;
    if object.len() == 2 && object.get("type")? == "object" {
        object.get("description")?.as_str()
    } else {
        None
    }
}

/// An `allOf` item `oneOf: [..., {"type": "null"}]` becomes `anyOf: [..., {"type": "object"}]`.
fn absent_when_null(item: &mut Value) {
    let Some(object) = item.as_object_mut() else {
        return;
    };
    let Some(Value::Array(choices)) = object.get("oneOf") else {
        return;
    };
    let is_null = |choice: &Value| choice.get("type").is_some_and(|kind| kind == "null");
    if !choices.iter().any(is_null) {
        return;
    }
    let mut choices: Vec<Value> = choices.iter().filter(|c| !is_null(c)).cloned().collect();
    choices.push(Value::Object(Map::from_iter([(
        "type".to_owned(),
        Value::String("object".to_owned()),
    )])));
    object.remove("oneOf");
    object.insert("anyOf".to_owned(), Value::Array(choices));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_described_inline_schema_keeps_its_description_and_loses_the_object() {
        let field = json!({"allOf": [
            {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            {"type": "object", "description": "When it happened."},
        ]});
        assert_eq!(
            mended(field),
            json!({
                "allOf": [{"oneOf": [{"type": "string"}, {"type": "integer"}]}],
                "description": "When it happened.",
            })
        );
    }

    #[test]
    fn a_flattened_option_may_be_absent_but_never_null() {
        let row = json!({"components": {"schemas": {"Row": {"allOf": [
            {"oneOf": [{"$ref": "#/components/schemas/Views"}, {"type": "null"}]},
            {"type": "object", "properties": {"value": {"type": ["string", "null"]}}},
        ]}}}});
        assert_eq!(
            mended(row)["components"]["schemas"]["Row"]["allOf"],
            json!([
                {"anyOf": [{"$ref": "#/components/schemas/Views"}, {"type": "object"}]},
                {"type": "object", "properties": {"value": {"type": ["string", "null"]}}},
            ])
        );
    }

    #[test]
    fn objects_with_properties_and_nullable_fields_stay() {
        let schema = json!({
            "allOf": [{"type": "object", "description": "d", "properties": {}}],
            "properties": {"x": {"oneOf": [{"type": "string"}, {"type": "null"}]}},
        });
        assert_eq!(mended(schema.clone()), schema);
    }
}
