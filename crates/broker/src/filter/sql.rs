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
use std::collections::VecDeque;

/// Nodes in one expression at most. Evaluation and dropping recurse once per level of the
/// tree, and a tree of 1,024 nodes is at most that deep: far within a thread's stack. Real
/// selectors have tens of nodes.
const NODES_MAX: usize = 1024;
/// Parentheses and unary operators nested at most. Each level costs the parser about seven
/// stack frames; 64 levels stay far within a thread's stack.
const NESTING_MAX: usize = 64;

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
        let mut parser = Parser {
            lexer: Lexer { text, at: 0 },
            ahead: VecDeque::new(),
            nodes: 0,
            nesting: 0,
        };
        let expr = parser.or_expression()?;
        let root = parser.as_boolean(expr, 0)?;
        // RocketMQ stops at the end of the first complete expression and ignores the rest
        // ("a = 1 b" selects as "a = 1"); refusing it here would refuse what RocketMQ takes.
        Ok(Selector { root })
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
                let left = left.evaluate(property)?;
                let right = right.evaluate(property)?;
                match (&left, &right) {
                    (Value::Null, Value::Null) => Value::Bool(true),
                    (Value::Null, _) => Value::Null,
                    (_, Value::Null) => Value::Bool(false),
                    _ => Value::Bool(compare(&left, &right)? == Ordering::Equal),
                }
            }
            Expr::Compare(order, left, right) => {
                let left = left.evaluate(property)?;
                if left == Value::Null {
                    return Ok(Value::Null);
                }
                let right = right.evaluate(property)?;
                let ordering = match (&left, &right) {
                    (_, Value::Null) => return Ok(Value::Null),
                    // Two strings are ordered as numbers, or not at all.
                    (Value::Str(l), Value::Str(r)) => {
                        compare_doubles(java_double(l)?, java_double(r)?)
                    }
                    _ => compare(&left, &right)?,
                };
                Value::Bool(order.holds(ordering))
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
                    Value::Str(text) => {
                        let found = match test {
                            TextTest::Contains => text.contains(search.as_str()),
                            TextTest::StartsWith => text.starts_with(search.as_str()),
                            TextTest::EndsWith => text.ends_with(search.as_str()),
                        };
                        Value::Bool(found != *negated)
                    }
                    _ => Value::Bool(false),
                }
            }
        })
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

// ---------------------------------------------------------------------------------------------
// Tokens, as the JavaCC token manager cuts them (keywords case-insensitive, longest match).

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Not,
    And,
    Or,
    Between,
    In,
    True,
    False,
    Null,
    Is,
    Contains,
    StartsWith,
    EndsWith,
    Decimal(String),
    Float(String),
    Str(String),
    Id(String),
    Equal,
    NotEqual,
    Greater,
    GreaterOrEqual,
    Less,
    LessOrEqual,
    Open,
    Close,
    Comma,
    Plus,
    Minus,
    End,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Decimal(t) | Token::Float(t) => format!("number {t}"),
            Token::Str(t) => format!("string '{t}'"),
            Token::Id(t) => format!("identifier {t}"),
            Token::End => "the end".to_string(),
            Token::Equal => "=".to_string(),
            Token::NotEqual => "<>".to_string(),
            Token::Greater => ">".to_string(),
            Token::GreaterOrEqual => ">=".to_string(),
            Token::Less => "<".to_string(),
            Token::LessOrEqual => "<=".to_string(),
            Token::Open => "(".to_string(),
            Token::Close => ")".to_string(),
            Token::Comma => ",".to_string(),
            Token::Plus => "+".to_string(),
            Token::Minus => "-".to_string(),
            keyword => format!("{keyword:?}").to_uppercase(),
        }
    }
}

struct Lexer<'t> {
    text: &'t str,
    /// Byte position of the next character.
    at: usize,
}

impl Lexer<'_> {
    fn error(&self, at: usize, reason: impl Into<String>) -> ParseError {
        ParseError {
            column: self.text[..at].chars().count() + 1,
            reason: reason.into(),
        }
    }

    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    /// Skips white space and comments. A line comment needs its line break: without one,
    /// `--` is two minus signs, as in RocketMQ's grammar.
    fn skip(&mut self) {
        loop {
            let rest = self.rest();
            if let Some(c) = rest
                .chars()
                .next()
                .filter(|c| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c'))
            {
                self.at += c.len_utf8();
            } else if let Some(comment) = rest.strip_prefix("--") {
                match comment.find(['\n', '\r']) {
                    Some(end) => self.at += 2 + end + 1,
                    None => return,
                }
            } else if let Some(comment) = rest.strip_prefix("/*") {
                match comment.find("*/") {
                    Some(end) => self.at += 2 + end + 2,
                    None => return,
                }
            } else {
                return;
            }
        }
    }

    /// The next token and where it starts.
    fn next(&mut self) -> Result<(Token, usize), ParseError> {
        self.skip();
        let start = self.at;
        let rest = self.rest();
        let Some(c) = rest.chars().next() else {
            return Ok((Token::End, start));
        };
        let (token, length) = match c {
            '=' => (Token::Equal, 1),
            '<' if rest.starts_with("<>") => (Token::NotEqual, 2),
            '<' if rest.starts_with("<=") => (Token::LessOrEqual, 2),
            '<' => (Token::Less, 1),
            '>' if rest.starts_with(">=") => (Token::GreaterOrEqual, 2),
            '>' => (Token::Greater, 1),
            '(' => (Token::Open, 1),
            ')' => (Token::Close, 1),
            ',' => (Token::Comma, 1),
            '+' => (Token::Plus, 1),
            '-' => (Token::Minus, 1),
            '\'' => self.string(start)?,
            '0'..='9' | '.' => self.number(start)?,
            c if c.is_ascii_alphabetic() || c == '_' || c == '$' => {
                let length = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
                    .unwrap_or(rest.len());
                (keyword_or_identifier(&rest[..length]), length)
            }
            '/' if rest.starts_with("/*") => {
                return Err(self.error(start, "comment opened with /* is never closed"))
            }
            '!' if rest.starts_with("!=") => {
                return Err(self.error(start, "unexpected '!='; write <> for not equal"))
            }
            other => return Err(self.error(start, format!("unexpected character {other:?}"))),
        };
        self.at += length;
        Ok((token, start))
    }

    /// A quoted string; `''` inside stands for one quote.
    fn string(&self, start: usize) -> Result<(Token, usize), ParseError> {
        let body = &self.text[start + 1..];
        let mut value = String::new();
        let mut chars = body.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if c == '\'' {
                if chars.peek().is_some_and(|(_, next)| *next == '\'') {
                    chars.next();
                    value.push('\'');
                } else {
                    return Ok((Token::Str(value), i + 2));
                }
            } else {
                value.push(c);
            }
        }
        Err(self.error(start, "string literal is never closed"))
    }

    /// `0`, `123`, `123L` (decimal); `1.5`, `1.`, `.5`, `1e3`, `1.5E-3` (floating point).
    fn number(&self, start: usize) -> Result<(Token, usize), ParseError> {
        let bytes = self.text.as_bytes();
        let digits_from = |from: usize| {
            bytes[from..]
                .iter()
                .position(|b| !b.is_ascii_digit())
                .map_or(bytes.len(), |n| from + n)
        };
        // The end of an exponent starting at `from`, if one is there whole.
        let exponent_end = |from: usize| {
            if !matches!(bytes.get(from), Some(b'e' | b'E')) {
                return None;
            }
            let mut at = from + 1;
            if matches!(bytes.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            let end = digits_from(at);
            (end > at).then_some(end)
        };
        let integer_end = digits_from(start);
        let float_end = if bytes.get(integer_end) == Some(&b'.') {
            let fraction_end = digits_from(integer_end + 1);
            if integer_end == start && fraction_end == integer_end + 1 {
                return Err(self.error(start, "unexpected character '.'"));
            }
            Some(exponent_end(fraction_end).unwrap_or(fraction_end))
        } else {
            exponent_end(integer_end)
        };
        if let Some(end) = float_end {
            return Ok((Token::Float(self.text[start..end].to_string()), end - start));
        }
        if bytes[start] == b'0' {
            return Ok((Token::Decimal("0".to_string()), 1));
        }
        let end = if matches!(bytes.get(integer_end), Some(b'l' | b'L')) {
            integer_end + 1
        } else {
            integer_end
        };
        Ok((
            Token::Decimal(self.text[start..end].to_string()),
            end - start,
        ))
    }
}

fn keyword_or_identifier(word: &str) -> Token {
    const KEYWORDS: [(&str, Token); 12] = [
        ("NOT", Token::Not),
        ("AND", Token::And),
        ("OR", Token::Or),
        ("BETWEEN", Token::Between),
        ("IN", Token::In),
        ("TRUE", Token::True),
        ("FALSE", Token::False),
        ("NULL", Token::Null),
        ("IS", Token::Is),
        ("CONTAINS", Token::Contains),
        ("STARTSWITH", Token::StartsWith),
        ("ENDSWITH", Token::EndsWith),
    ];
    KEYWORDS
        .iter()
        .find(|(keyword, _)| keyword.eq_ignore_ascii_case(word))
        .map_or_else(|| Token::Id(word.to_string()), |(_, token)| token.clone())
}

// ---------------------------------------------------------------------------------------------
// The grammar: or > and > equality (=, <>, IS [NOT] NULL) > comparison (<, >, BETWEEN, IN,
// CONTAINS...) > unary (+, -, NOT) > primary (literal, property, parentheses).

struct Parser<'t> {
    lexer: Lexer<'t>,
    /// Tokens read ahead (at most two); a token is cut only when the grammar looks at it, so
    /// a bad character after a complete expression goes unnoticed, as in RocketMQ.
    ahead: VecDeque<(Token, usize)>,
    nodes: usize,
    nesting: usize,
}

impl Parser<'_> {
    fn peek_nth(&mut self, n: usize) -> Result<&Token, ParseError> {
        while self.ahead.len() <= n {
            let token = self.lexer.next()?;
            self.ahead.push_back(token);
        }
        Ok(&self.ahead[n].0)
    }

    fn peek(&mut self) -> Result<&Token, ParseError> {
        self.peek_nth(0)
    }

    fn take(&mut self) -> Result<(Token, usize), ParseError> {
        self.peek()?;
        Ok(self.ahead.pop_front().expect("peek filled the look-ahead"))
    }

    /// The start of the next token, for errors about it.
    fn position(&mut self) -> Result<usize, ParseError> {
        self.peek()?;
        Ok(self.ahead[0].1)
    }

    fn error(&self, at: usize, reason: impl Into<String>) -> ParseError {
        self.lexer.error(at, reason)
    }

    fn expect(&mut self, wanted: Token, what: &str) -> Result<(), ParseError> {
        let (token, at) = self.take()?;
        if token == wanted {
            Ok(())
        } else {
            Err(self.error(at, format!("expected {what}, found {}", token.describe())))
        }
    }

    fn string_literal(&mut self) -> Result<String, ParseError> {
        match self.take()? {
            (Token::Str(value), _) => Ok(value),
            (other, at) => Err(self.error(
                at,
                format!("expected a string literal, found {}", other.describe()),
            )),
        }
    }

    /// Counts a new node against NODES_MAX.
    fn node(&mut self, expr: Expr, at: usize) -> Result<Expr, ParseError> {
        self.nodes += 1;
        if self.nodes > NODES_MAX {
            return Err(self.error(
                at,
                format!("expression too large (more than {NODES_MAX} terms)"),
            ));
        }
        Ok(expr)
    }

    fn nested<T>(
        &mut self,
        at: usize,
        inner: impl FnOnce(&mut Self) -> Result<T, ParseError>,
    ) -> Result<T, ParseError> {
        if self.nesting >= NESTING_MAX {
            return Err(self.error(at, format!("nested more than {NESTING_MAX} levels deep")));
        }
        self.nesting += 1;
        let result = inner(self);
        self.nesting -= 1;
        result
    }

    /// A condition where a boolean is expected: a boolean expression, or a property (which a
    /// string never satisfies); anything else is refused.
    fn as_boolean(&mut self, expr: Expr, at: usize) -> Result<Expr, ParseError> {
        match expr {
            expr if expr.is_boolean() => Ok(expr),
            expr @ Expr::Property(_) => self.node(Expr::BooleanCast(Box::new(expr)), at),
            _ => Err(self.error(at, "this expression does not give a boolean value")),
        }
    }

    fn or_expression(&mut self) -> Result<Expr, ParseError> {
        self.logic(Token::Or, Self::and_expression, Expr::Or)
    }

    fn and_expression(&mut self) -> Result<Expr, ParseError> {
        self.logic(Token::And, Self::equality_expression, Expr::And)
    }

    /// `term (keyword term)*`, as one n-ary node.
    fn logic(
        &mut self,
        keyword: Token,
        term: fn(&mut Self) -> Result<Expr, ParseError>,
        build: fn(Vec<Expr>) -> Expr,
    ) -> Result<Expr, ParseError> {
        let start = self.position()?;
        let first = term(self)?;
        if *self.peek()? != keyword {
            return Ok(first);
        }
        let mut terms = vec![self.as_boolean(first, start)?];
        while *self.peek()? == keyword {
            self.take()?;
            let at = self.position()?;
            let next = term(self)?;
            terms.push(self.as_boolean(next, at)?);
        }
        self.node(build(terms), start)
    }

    fn equality_expression(&mut self) -> Result<Expr, ParseError> {
        let mut left = self.comparison_expression()?;
        loop {
            let at = self.position()?;
            left = match self.peek()? {
                Token::Equal | Token::NotEqual => {
                    let negated = self.take()?.0 == Token::NotEqual;
                    let right = self.comparison_expression()?;
                    let equal = self.equal(left, right, at)?;
                    if negated {
                        self.node(Expr::Not(Box::new(equal)), at)?
                    } else {
                        equal
                    }
                }
                Token::Is => {
                    self.take()?;
                    let negated = *self.peek()? == Token::Not;
                    if negated {
                        self.take()?;
                    }
                    self.expect(Token::Null, "NULL after IS")?;
                    let null = self.node(Expr::Literal(Value::Null), at)?;
                    let is_null = self.node(Expr::Equal(Box::new(left), Box::new(null)), at)?;
                    if negated {
                        self.node(Expr::Not(Box::new(is_null)), at)?
                    } else {
                        is_null
                    }
                }
                _ => return Ok(left),
            };
        }
    }

    /// `=`: RocketMQ refuses NULL on either side (IS NULL is the way) and a TRUE, FALSE or
    /// NULL literal compared with a literal of another kind.
    fn equal(&mut self, left: Expr, right: Expr, at: usize) -> Result<Expr, ParseError> {
        for side in [&left, &right] {
            if matches!(side, Expr::Literal(Value::Null)) {
                return Err(self.error(at, "NULL cannot be compared with =; use IS NULL"));
            }
        }
        if let (Expr::Literal(_), Expr::Literal(_)) = (&left, &right) {
            if left.is_boolean() && !right.is_boolean() {
                return Err(self.error(at, "a boolean cannot be compared with a non-boolean"));
            }
        }
        self.node(Expr::Equal(Box::new(left), Box::new(right)), at)
    }

    /// `<`, `<=`, `>`, `>=`: neither side may be a string, boolean or NULL literal, nor a
    /// condition.
    fn order(
        &mut self,
        order: Order,
        left: Expr,
        right: Expr,
        at: usize,
    ) -> Result<Expr, ParseError> {
        for side in [&left, &right] {
            let comparable = match side {
                Expr::Literal(value) => {
                    matches!(value, Value::Int(_) | Value::Long(_) | Value::Double(_))
                }
                other => !other.is_boolean(),
            };
            if !comparable {
                return Err(self.error(
                    at,
                    "only numbers and properties can be compared with <, <=, >, >= or BETWEEN",
                ));
            }
        }
        self.node(Expr::Compare(order, Box::new(left), Box::new(right)), at)
    }

    fn comparison_expression(&mut self) -> Result<Expr, ParseError> {
        let mut left = self.unary_expression()?;
        loop {
            let at = self.position()?;
            let (negated, operator) = match self.peek()?.clone() {
                Token::Not => {
                    let next = self.peek_nth(1)?.clone();
                    if !matches!(
                        next,
                        Token::Contains
                            | Token::StartsWith
                            | Token::EndsWith
                            | Token::Between
                            | Token::In
                    ) {
                        return Ok(left);
                    }
                    self.take()?;
                    (true, next)
                }
                other => (false, other),
            };
            left = match operator {
                Token::Greater | Token::GreaterOrEqual | Token::Less | Token::LessOrEqual
                    if !negated =>
                {
                    self.take()?;
                    let order = match operator {
                        Token::Greater => Order::Greater,
                        Token::GreaterOrEqual => Order::GreaterOrEqual,
                        Token::Less => Order::Less,
                        _ => Order::LessOrEqual,
                    };
                    let right = self.unary_expression()?;
                    self.order(order, left, right, at)?
                }
                Token::Contains | Token::StartsWith | Token::EndsWith => {
                    self.take()?;
                    let test = match operator {
                        Token::Contains => TextTest::Contains,
                        Token::StartsWith => TextTest::StartsWith,
                        _ => TextTest::EndsWith,
                    };
                    let search = self.string_literal()?;
                    let operand = Box::new(left);
                    self.node(
                        Expr::Text {
                            test,
                            negated,
                            operand,
                            search,
                        },
                        at,
                    )?
                }
                Token::Between => {
                    self.take()?;
                    let low = self.unary_expression()?;
                    self.expect(Token::And, "AND between the bounds of BETWEEN")?;
                    let high = self.unary_expression()?;
                    self.between(left, low, high, negated, at)?
                }
                Token::In => {
                    self.take()?;
                    let Expr::Property(property) = left else {
                        return Err(self.error(at, "IN needs a property on its left"));
                    };
                    self.expect(Token::Open, "( after IN")?;
                    let mut list = vec![self.string_literal()?];
                    while *self.peek()? == Token::Comma {
                        self.take()?;
                        list.push(self.string_literal()?);
                    }
                    self.expect(Token::Close, ") or , in the IN list")?;
                    self.node(
                        Expr::In {
                            property,
                            list,
                            negated,
                        },
                        at,
                    )?
                }
                _ => return Ok(left),
            };
        }
    }

    /// `v BETWEEN low AND high` is `v >= low AND v <= high`; NOT BETWEEN is
    /// `v < low OR v > high`. Literal bounds must not be NULL nor in the wrong order.
    fn between(
        &mut self,
        value: Expr,
        low: Expr,
        high: Expr,
        negated: bool,
        at: usize,
    ) -> Result<Expr, ParseError> {
        if !negated {
            if let (Expr::Literal(l), Expr::Literal(h)) = (&low, &high) {
                if *l == Value::Null || *h == Value::Null {
                    return Err(self.error(at, "the bounds of BETWEEN cannot be NULL"));
                }
                match compare(h, l) {
                    Ok(Ordering::Less) => {
                        return Err(self.error(
                            at,
                            "the lower bound of BETWEEN is greater than the upper bound",
                        ))
                    }
                    Ok(_) => {}
                    Err(Failed) => {
                        return Err(self.error(at, "the bounds of BETWEEN cannot be compared"))
                    }
                }
            }
        }
        let (first, second, build): (_, _, fn(Vec<Expr>) -> Expr) = if negated {
            (Order::Less, Order::Greater, Expr::Or)
        } else {
            (Order::GreaterOrEqual, Order::LessOrEqual, Expr::And)
        };
        let above = self.order(first, value.clone(), low, at)?;
        let below = self.order(second, value, high, at)?;
        self.node(build(vec![above, below]), at)
    }

    fn unary_expression(&mut self) -> Result<Expr, ParseError> {
        let at = self.position()?;
        match self.peek()? {
            Token::Plus => {
                self.take()?;
                self.nested(at, Self::unary_expression)
            }
            Token::Minus => {
                self.take()?;
                let operand = self.nested(at, Self::unary_expression)?;
                self.node(Expr::Negate(Box::new(operand)), at)
            }
            Token::Not => {
                self.take()?;
                let operand_at = self.position()?;
                let operand = self.nested(at, Self::unary_expression)?;
                let operand = self.as_boolean(operand, operand_at)?;
                self.node(Expr::Not(Box::new(operand)), at)
            }
            _ => self.primary_expression(),
        }
    }

    fn primary_expression(&mut self) -> Result<Expr, ParseError> {
        let (token, at) = self.take()?;
        let expr = match token {
            Token::Open => {
                let inner = self.nested(at, Self::or_expression)?;
                self.expect(Token::Close, ")")?;
                return Ok(inner);
            }
            Token::Id(name) => Expr::Property(name),
            Token::Str(value) => Expr::Literal(Value::Str(Cow::Owned(value))),
            Token::True => Expr::Literal(Value::Bool(true)),
            Token::False => Expr::Literal(Value::Bool(false)),
            Token::Null => Expr::Literal(Value::Null),
            Token::Decimal(text) => Expr::Literal(self.decimal(&text, at)?),
            Token::Float(text) => Expr::Literal(self.float(&text, at)?),
            other => {
                return Err(self.error(
                    at,
                    format!(
                        "expected a property, a literal or (, found {}",
                        other.describe()
                    ),
                ))
            }
        };
        self.node(expr, at)
    }

    /// A 64-bit integer (RocketMQ's range), typed Int when it fits 32 bits as Java types it.
    fn decimal(&self, text: &str, at: usize) -> Result<Value<'static>, ParseError> {
        let digits = text.trim_end_matches(['l', 'L']);
        let value: i64 = digits.parse().map_err(|_| {
            self.error(
                at,
                format!("{text} is outside the range of a 64-bit integer"),
            )
        })?;
        Ok(i32::try_from(value).map_or(Value::Long(value), Value::Int))
    }

    /// RocketMQ refuses a floating literal that overflows, or that is below the smallest
    /// positive double (0.0 included: a literal has no sign of its own).
    fn float(&self, text: &str, at: usize) -> Result<Value<'static>, ParseError> {
        match text.parse::<f64>() {
            Ok(value) if value.is_finite() && value > 0.0 => Ok(Value::Double(value)),
            _ => Err(self.error(
                at,
                format!("{text}: a decimal literal must be above 0 and finite (write 0 for zero)"),
            )),
        }
    }
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
