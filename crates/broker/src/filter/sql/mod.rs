//! RocketMQ's SQL92 message selector (`MessageSelector.bySql`): the grammar of its
//! `SelectorParser.jj` and the evaluation of its expression classes, over a message's
//! properties (tags are the property `TAGS`).
//!
//! Hand-written rather than built on a general SQL parser: RocketMQ's language is small and
//! differs from SQL where it matters to clients. There is no `!=` (only `<>`), identifiers
//! have no dots and no quotes, IN takes string literals only, CONTAINS / STARTSWITH /
//! ENDSWITH exist, a line comment ends only at a line break, and whatever follows a complete
//! expression is ignored. A general parser would accept expressions RocketMQ refuses and
//! refuse some it accepts.
//!
//! Evaluation follows RocketMQ's three-valued logic: a missing property is NULL, a comparison
//! with NULL is NULL, and only TRUE selects a message. A property (always a string) compared
//! with a number is converted to the number's type; if it does not convert, the whole
//! evaluation fails and the message is not selected, as RocketMQ's exception does.

use std::borrow::Cow;
use std::cmp::Ordering;

mod parse;

/// Why an expression does not parse: what was wrong and where (a 1-based character column).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid SQL92 expression at column {column}: {reason}")]
pub struct ParseError {
    pub column: usize,
    pub reason: String,
}

/// A parsed selector.
#[derive(Debug, Clone)]
pub struct Selector {
    root: Expr,
}

impl Selector {
    pub fn parse(text: &str) -> Result<Selector, ParseError> {
        Ok(Selector {
            root: parse::boolean_expression(text)?,
        })
    }

    /// Whether a message with these properties is selected: the expression gives TRUE.
    /// `property` looks a property up by its exact name.
    pub fn matches<'a>(&'a self, property: &dyn Fn(&str) -> Option<Cow<'a, str>>) -> bool {
        matches!(self.root.evaluate(property), Ok(Value::Bool(true)))
    }
}

// ---------------------------------------------------------------------------------------------
// Values and their comparison, as RocketMQ's ComparisonExpression converts them.

/// A value during evaluation. Integer literals are Int when they fit 32 bits, as in Java.
#[derive(Debug, Clone, PartialEq)]
enum Value<'a> {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(Cow<'a, str>),
}

/// Evaluation stopped: RocketMQ threw, and a message whose evaluation throws is not selected.
#[derive(Debug)]
struct Failed;

/// Java's `Double.compare`: -0.0 below 0.0, NaN equal to itself and above everything.
fn compare_doubles(left: f64, right: f64) -> Ordering {
    let canonical = |v: f64| if v.is_nan() { f64::NAN } else { v };
    canonical(left).total_cmp(&canonical(right))
}

/// `Integer.valueOf` / `Long.valueOf`: an optional sign and ASCII digits, nothing else.
fn java_int(text: &str) -> Result<i32, Failed> {
    text.parse().map_err(|_| Failed)
}

fn java_long(text: &str) -> Result<i64, Failed> {
    text.parse().map_err(|_| Failed)
}

/// `Double.valueOf`: surrounding spaces and control characters trimmed, `NaN` and `Infinity`
/// spelled as Java spells them, an optional `f`/`d` suffix.
fn java_double(text: &str) -> Result<f64, Failed> {
    let trimmed = text.trim_matches(|c: char| c <= ' ');
    let (negative, unsigned) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        _ => (false, trimmed),
    };
    let magnitude = match unsigned {
        "NaN" => f64::NAN,
        "Infinity" => f64::INFINITY,
        _ => {
            let digits = unsigned
                .strip_suffix(['f', 'F', 'd', 'D'])
                .unwrap_or(unsigned);
            // Rust would also take "inf" and "nan" in any case, which Java refuses.
            if !digits
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
            {
                return Err(Failed);
            }
            digits.parse::<f64>().map_err(|_| Failed)?
        }
    };
    Ok(if negative { -magnitude } else { magnitude })
}

/// RocketMQ's `__compare`: values of different types are converted towards the right-hand
/// one's type where Java converts them; incomparable types answer "less" (-1), and a string
/// that does not convert, or a boolean against a string, fails.
fn compare(left: &Value, right: &Value) -> Result<Ordering, Failed> {
    use Value::*;
    Ok(match (left, right) {
        (Bool(l), Bool(r)) => l.cmp(r),
        (Int(l), Int(r)) => l.cmp(r),
        (Long(l), Long(r)) => l.cmp(r),
        (Double(l), Double(r)) => compare_doubles(*l, *r),
        (Str(l), Str(r)) => l.cmp(r),
        // Java casts the Boolean to a String here and throws.
        (Bool(_), Str(_)) => return Err(Failed),
        (Int(l), Long(r)) => i64::from(*l).cmp(r),
        (Long(l), Int(r)) => l.cmp(&i64::from(*r)),
        (Int(l), Double(r)) => compare_doubles(f64::from(*l), *r),
        (Double(l), Int(r)) => compare_doubles(*l, f64::from(*r)),
        (Long(l), Double(r)) => compare_doubles(*l as f64, *r),
        (Double(l), Long(r)) => compare_doubles(*l, *r as f64),
        (Int(l), Str(r)) => l.cmp(&java_int(r)?),
        (Long(l), Str(r)) => l.cmp(&java_long(r)?),
        (Double(l), Str(r)) => compare_doubles(*l, java_double(r)?),
        (Str(l), Bool(r)) => l.eq_ignore_ascii_case("true").cmp(r),
        (Str(l), Int(r)) => java_int(l)?.cmp(r),
        (Str(l), Long(r)) => java_long(l)?.cmp(r),
        (Str(l), Double(r)) => compare_doubles(java_double(l)?, *r),
        _ => Ordering::Less,
    })
}

// ---------------------------------------------------------------------------------------------
// The expression tree.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Greater,
    GreaterOrEqual,
    Less,
    LessOrEqual,
}

impl Order {
    fn holds(self, ordering: Ordering) -> bool {
        match self {
            Order::Greater => ordering == Ordering::Greater,
            Order::GreaterOrEqual => ordering != Ordering::Less,
            Order::Less => ordering == Ordering::Less,
            Order::LessOrEqual => ordering != Ordering::Greater,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TextTest {
    Contains,
    StartsWith,
    EndsWith,
}

#[derive(Debug, Clone)]
enum Expr {
    Literal(Value<'static>),
    Property(String),
    Negate(Box<Expr>),
    Not(Box<Expr>),
    /// A property where a boolean is expected: TRUE only if it holds a Boolean, which a
    /// message property (a string) never does.
    BooleanCast(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    /// `=`, and IS NULL as `= NULL` (which `=` itself refuses at parse time).
    Equal(Box<Expr>, Box<Expr>),
    Compare(Order, Box<Expr>, Box<Expr>),
    In {
        property: String,
        list: Vec<String>,
        negated: bool,
    },
    Text {
        test: TextTest,
        negated: bool,
        operand: Box<Expr>,
        search: String,
    },
}

impl Expr {
    /// Whether RocketMQ types this as a BooleanExpression (TRUE, FALSE and NULL literals
    /// included), which decides what may be compared and what may stand as a condition.
    fn is_boolean(&self) -> bool {
        match self {
            Expr::Literal(value) => matches!(value, Value::Bool(_) | Value::Null),
            Expr::Property(_) | Expr::Negate(_) => false,
            _ => true,
        }
    }

    fn evaluate<'a>(
        &'a self,
        property: &dyn Fn(&str) -> Option<Cow<'a, str>>,
    ) -> Result<Value<'a>, Failed> {
        Ok(match self {
            Expr::Literal(value) => match value {
                Value::Str(text) => Value::Str(Cow::Borrowed(text.as_ref())),
                other => other.clone(),
            },
            Expr::Property(name) => property(name).map_or(Value::Null, Value::Str),
            Expr::Negate(operand) => match operand.evaluate(property)? {
                Value::Int(v) => Value::Int(v.wrapping_neg()),
                Value::Long(v) => Value::Long(v.wrapping_neg()),
                Value::Double(v) => Value::Double(-v),
                _ => Value::Null,
            },
            Expr::Not(operand) => match operand.evaluate(property)? {
                Value::Null => Value::Null,
                Value::Bool(v) => Value::Bool(!v),
                _ => return Err(Failed),
            },
            Expr::BooleanCast(operand) => match operand.evaluate(property)? {
                Value::Null => Value::Null,
                Value::Bool(v) => Value::Bool(v),
                _ => Value::Bool(false),
            },
            Expr::And(terms) => logic(terms, false, property)?,
            Expr::Or(terms) => logic(terms, true, property)?,
            Expr::Equal(left, right) => {
                equal(&left.evaluate(property)?, &right.evaluate(property)?)?
            }
            Expr::Compare(order, left, right) => {
                let left = left.evaluate(property)?;
                if left == Value::Null {
                    return Ok(Value::Null);
                }
                ordered(*order, &left, &right.evaluate(property)?)?
            }
            Expr::In {
                property: name,
                list,
                negated,
            } => match property(name) {
                None => Value::Null,
                Some(value) => Value::Bool(list.iter().any(|item| *item == *value) != *negated),
            },
            Expr::Text {
                test,
                negated,
                operand,
                search,
            } => {
                if search.is_empty() {
                    return Ok(Value::Bool(false));
                }
                match operand.evaluate(property)? {
                    Value::Str(text) => Value::Bool(test.holds(&text, search) != *negated),
                    _ => Value::Bool(false),
                }
            }
        })
    }
}

/// `=`: NULL equals only NULL (an unset property against a value is NULL, a value against NULL
/// is false, as RocketMQ's evaluator answers).
fn equal<'a>(left: &Value<'a>, right: &Value<'a>) -> Result<Value<'a>, Failed> {
    Ok(match (left, right) {
        (Value::Null, Value::Null) => Value::Bool(true),
        (Value::Null, _) => Value::Null,
        (_, Value::Null) => Value::Bool(false),
        _ => Value::Bool(compare(left, right)? == Ordering::Equal),
    })
}

/// `<`, `<=`, `>`, `>=` with a left side that is not NULL: two strings are ordered as numbers,
/// or not at all.
fn ordered<'a>(order: Order, left: &Value<'a>, right: &Value<'a>) -> Result<Value<'a>, Failed> {
    let ordering = match (left, right) {
        (_, Value::Null) => return Ok(Value::Null),
        (Value::Str(l), Value::Str(r)) => compare_doubles(java_double(l)?, java_double(r)?),
        _ => compare(left, right)?,
    };
    Ok(Value::Bool(order.holds(ordering)))
}

impl TextTest {
    fn holds(self, text: &str, search: &str) -> bool {
        match self {
            TextTest::Contains => text.contains(search),
            TextTest::StartsWith => text.starts_with(search),
            TextTest::EndsWith => text.ends_with(search),
        }
    }
}

/// AND (`decisive` false) or OR (`decisive` true), left to right: the first term equal to
/// `decisive` decides without evaluating the rest; else NULL if any term was NULL.
fn logic<'a>(
    terms: &'a [Expr],
    decisive: bool,
    property: &dyn Fn(&str) -> Option<Cow<'a, str>>,
) -> Result<Value<'a>, Failed> {
    let mut unknown = false;
    for term in terms {
        match term.evaluate(property)? {
            Value::Bool(v) if v == decisive => return Ok(Value::Bool(decisive)),
            Value::Bool(_) => {}
            Value::Null => unknown = true,
            _ => return Err(Failed),
        }
    }
    Ok(if unknown {
        Value::Null
    } else {
        Value::Bool(!decisive)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn selects(expression: &str, properties: &[(&str, &str)]) -> bool {
        let selector = Selector::parse(expression)
            .unwrap_or_else(|e| panic!("{expression:?} should parse: {e}"));
        selector.matches(&|name| {
            properties
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| Cow::Borrowed(*v))
        })
    }

    fn refused(expression: &str) -> String {
        match Selector::parse(expression) {
            Ok(selector) => panic!("{expression:?} should be refused, parsed as {selector:?}"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn numbers_compare_with_string_properties_by_conversion() {
        let m = [("a", "4"), ("b", "2.5"), ("big", "3000000000")];
        assert!(selects("a BETWEEN 3 AND 5", &m));
        assert!(!selects("a NOT BETWEEN 3 AND 5", &m));
        assert!(selects(
            "a > 3 AND a >= 4 AND a < 5 AND a <= 4 AND a = 4",
            &m
        ));
        assert!(selects("a <> 5", &m));
        assert!(selects("b > 2.0 AND b < 2.6", &m));
        assert!(selects("a > 3.5", &m));
        assert!(selects("big > 2147483648", &m));
        // Compared with an int literal, "2.5" does not convert: the whole evaluation fails.
        assert!(!selects("b > 2", &[("b", "2.5")]));
        assert!(!selects("b > 2 OR TRUE", &[("b", "2.5")]));
        assert!(selects("TRUE OR b > 2", &[("b", "2.5")]));
        // A 3e9 property against an int literal overflows Integer.valueOf.
        assert!(!selects("big > 3", &m));
        assert!(!selects("a = 4", &[("a", "four")]));
        // Two properties compare as doubles.
        assert!(selects("a > b", &m));
        // Negating a string gives NULL.
        assert!(!selects("-a < 0", &[("a", "4")]));
        assert!(selects("a > -1", &m));
    }

    #[test]
    fn missing_properties_are_null_and_never_select() {
        let none: [(&str, &str); 0] = [];
        for expression in [
            "a = 1",
            "a <> 1",
            "a > 1",
            "a BETWEEN 1 AND 2",
            "a IN ('x')",
            "a NOT IN ('x')",
            "NOT (a = 1)",
            "a CONTAINS 'x'",
            "a NOT CONTAINS 'x'",
            "a",
            "NOT a",
            "a IS NOT NULL",
        ] {
            assert!(!selects(expression, &none), "{expression}");
        }
        assert!(selects("a IS NULL", &none));
        assert!(selects("a IS NULL OR a = 1", &none));
        assert!(selects("a = 1 OR TRUE", &none));
        assert!(!selects("a = 1 AND TRUE", &none));
    }

    #[test]
    fn strings_tags_and_text_tests() {
        let m = [("TAGS", "A"), ("s", "hello world"), ("q", "it's")];
        assert!(selects("TAGS IN ('A', 'B')", &m));
        assert!(!selects("TAGS NOT IN ('A', 'B')", &m));
        assert!(selects("TAGS = 'A' AND TAGS <> 'B'", &m));
        assert!(!selects("tags = 'A'", &m), "names are case-sensitive");
        assert!(selects(
            "s CONTAINS 'lo w' AND s STARTSWITH 'hell' AND s ENDSWITH 'rld'",
            &m
        ));
        assert!(selects(
            "s NOT CONTAINS 'x' AND s NOT STARTSWITH 'w' AND s NOT ENDSWITH 'h'",
            &m
        ));
        assert!(!selects("s CONTAINS ''", &m));
        assert!(!selects("s NOT CONTAINS ''", &m));
        assert!(selects("q = 'it''s'", &m));
        assert!(selects("t = TRUE", &[("t", "TRUE")]));
        assert!(selects("t = FALSE", &[("t", "yes")]));
        assert!(!selects("TRUE = t", &[("t", "true")]));
    }

    #[test]
    fn logic_keywords_comments_and_trailing_text() {
        let m = [("a", "1"), ("b", "2")];
        assert!(selects("a = 1 and (b = 3 or b = 2)", &m));
        assert!(selects("NOT (a = 2)", &m));
        assert!(selects("/* c */ a = 1 -- line\n AND b = 2", &m));
        assert!(selects(
            "a = 1 -- no line break, so this is trailing text",
            &m
        ));
        // RocketMQ ignores what follows a complete expression.
        assert!(selects("a = 1 b = 5", &m));
        assert!(selects("a = 1)", &m));
        assert!(selects("TRUE", &m));
        assert!(!selects("FALSE", &m));
        assert!(selects("a = 1L AND 1 = 1.0 AND b = +2", &m));
        // NOT binds tighter than =: (NOT a) = 1 compares a boolean with a number.
        assert!(!selects("NOT a = 1", &m));
    }

    #[test]
    fn refuses_what_rocketmq_refuses() {
        for expression in [
            "",
            "a != 1",
            "a = NULL",
            "a > 'x'",
            "a > TRUE",
            "(a = 1) > 2",
            "a IN (1, 2)",
            "1 IN ('1')",
            "a BETWEEN 5 AND 3",
            "a BETWEEN NULL AND 3",
            "TRUE = 1",
            "3",
            "'x'",
            "a.b = 1",
            "\"a\" = 1",
            "a = 'open",
            "a = 0.0",
            "a = 1e400",
            "a = 9223372036854775808",
            "a IS 1",
            "/* open a = 1",
            "a = 1 AND",
            "-a",
        ] {
            let message = refused(expression);
            assert!(
                message.starts_with("invalid SQL92 expression at column"),
                "{message}"
            );
        }
        assert_eq!(
            Selector::parse("a != 1").unwrap_err(),
            ParseError {
                column: 3,
                reason: "unexpected '!='; write <> for not equal".into()
            }
        );
    }

    #[test]
    fn deep_or_huge_expressions_are_refused_not_overflowed() {
        let deep = format!("{}a = 1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(refused(&deep).contains("nested"));
        let nots = format!("{}a", "NOT ".repeat(10_000));
        assert!(refused(&nots).contains("nested"));
        let long = vec!["a = 1"; 5_000].join(" OR ");
        assert!(refused(&long).contains("too large"));
        let fits = vec!["a = 1"; 300].join(" OR ");
        assert!(selects(&fits, &[("a", "1")]));
    }

    #[test]
    fn java_number_parsing() {
        assert_eq!(java_double(" 1.5d ").unwrap(), 1.5);
        assert!(java_double("NaN").unwrap().is_nan());
        assert_eq!(java_double("-Infinity").unwrap(), f64::NEG_INFINITY);
        assert!(java_double("inf").is_err());
        assert!(java_double("nan").is_err());
        assert!(java_int("+7").is_ok() && java_int(" 7").is_err());
        assert_eq!(compare_doubles(-0.0, 0.0), Ordering::Less);
        assert_eq!(compare_doubles(f64::NAN, f64::INFINITY), Ordering::Greater);
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in ".{0,200}") {
            if let Ok(selector) = Selector::parse(&text) {
                selector.matches(&|_| Some(Cow::Borrowed("1")));
                selector.matches(&|_| None);
            }
        }

        #[test]
        fn token_soup_never_panics(
            tokens in proptest::collection::vec(
                prop_oneof![
                    Just("a"), Just("b"), Just("TAGS"), Just("("), Just(")"), Just("NOT"),
                    Just("AND"), Just("OR"), Just("="), Just("<>"), Just(">"), Just("<="),
                    Just("BETWEEN"), Just("IN"), Just("IS"), Just("NULL"), Just("TRUE"),
                    Just("'x'"), Just("1"), Just("2.5"), Just("-"), Just("+"), Just(","),
                    Just("CONTAINS"), Just("STARTSWITH"), Just("--"), Just("\n"), Just("/*"),
                    Just("*/"), Just("3000000000"), Just("'1'"),
                ],
                0..40,
            ),
            a in prop_oneof![Just("1"), Just("x"), Just("2.5"), Just("true"), Just("")],
        ) {
            let text = tokens.join(" ");
            if let Ok(selector) = Selector::parse(&text) {
                selector.matches(&|name| (name == "a").then_some(Cow::Borrowed(a)));
            }
        }
    }
}
