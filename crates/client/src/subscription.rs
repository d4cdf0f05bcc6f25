//! Tag subscriptions: `*` or `tagA || tagB`, as heartbeats carry them and as the client
//! filters pulled messages again by exact tag (the broker filters only by tag hash).

use quiver_wire::body::SubscriptionData;
use quiver_wire::message::{java_string_hash, property, StoredMessage};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    pub topic: String,
    /// As given: `*` or tags joined by `||`.
    pub expression: String,
    /// Empty means every message.
    pub tags: Vec<String>,
    pub version: i64,
}

impl Subscription {
    pub fn new(topic: &str, expression: &str, version: i64) -> Subscription {
        let expression = expression.trim();
        let tags: Vec<String> = if expression.is_empty() || expression == "*" {
            Vec::new()
        } else {
            expression
                .split("||")
                .map(str::trim)
                .filter(|tag| !tag.is_empty())
                .map(String::from)
                .collect()
        };
        Subscription {
            topic: topic.to_owned(),
            expression: if tags.is_empty() {
                "*".into()
            } else {
                tags.join(" || ")
            },
            tags,
            version,
        }
    }

    pub fn data(&self) -> SubscriptionData {
        SubscriptionData {
            class_filter_mode: false,
            code_set: self.tags.iter().map(|tag| java_string_hash(tag)).collect(),
            expression_type: "TAG".into(),
            sub_string: self.expression.clone(),
            sub_version: self.version,
            tags_set: self.tags.clone(),
            topic: self.topic.clone(),
        }
    }

    pub fn matches(&self, message: &StoredMessage) -> bool {
        if self.tags.is_empty() {
            return true;
        }
        quiver_wire::message::find_property(&message.properties, property::TAGS)
            .is_some_and(|tag| self.tags.iter().any(|wanted| wanted == tag))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_parse_like_java() {
        let all = Subscription::new("T", " * ", 5);
        assert!(all.tags.is_empty());
        assert_eq!(all.data().sub_string, "*");
        let some = Subscription::new("T", "a||b ||  c", 5);
        assert_eq!(some.tags, ["a", "b", "c"]);
        assert_eq!(some.data().code_set, [97, 98, 99]);
        assert_eq!(some.data().sub_string, "a || b || c");
    }
}
