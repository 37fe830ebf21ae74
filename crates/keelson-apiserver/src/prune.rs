//! Removing a field from an object by its path as schema validation reports it
//! (`spec.template.spec.containers[0].imagee`).

use serde_json::Value;

enum Step<'a> {
    Field(&'a str),
    Index(usize),
}

fn steps(path: &str) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (name, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            out.push(Step::Field(name));
        }
        while let Some(end) = rest.find(']') {
            if let Ok(i) = rest[1..end].parse() {
                out.push(Step::Index(i));
            }
            rest = &rest[end + 1..];
        }
    }
    out
}

/// Removes the field at `path`; a path that does not lead anywhere changes nothing.
pub fn remove_path(obj: &mut Value, path: &str) {
    let steps = steps(path);
    let Some((last, parents)) = steps.split_last() else { return };
    let mut cur = obj;
    for s in parents {
        let next = match s {
            Step::Field(f) => cur.get_mut(*f),
            Step::Index(i) => cur.get_mut(*i),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        Step::Field(f) => {
            cur.as_object_mut().map(|o| o.remove(*f));
        }
        Step::Index(i) => {
            if let Some(a) = cur.as_array_mut() {
                if *i < a.len() {
                    a.remove(*i);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn removes_nested_fields_and_ignores_missing_paths() {
        let mut o = json!({"spec": {"replicass": 2, "template": {"spec": {"containers": [{"name": "a", "imagee": "x"}, {"name": "b"}]}}}});
        remove_path(&mut o, "spec.replicass");
        remove_path(&mut o, "spec.template.spec.containers[0].imagee");
        remove_path(&mut o, "spec.nothing.here");
        remove_path(&mut o, "spec.template.spec.containers[7].x");
        assert_eq!(o, json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}}}));
    }
}
