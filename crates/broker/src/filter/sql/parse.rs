//! Cutting a selector into tokens, as the JavaCC token manager of RocketMQ's
//! `SelectorParser.jj` does (keywords case-insensitive, longest match), and parsing them into
//! the expression tree its grammar gives.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::VecDeque;

use super::{compare, Expr, Failed, Order, ParseError, TextTest, Value};

/// Nodes in one expression at most. Evaluation and dropping recurse once per level of the
/// tree, and a tree of 1,024 nodes is at most that deep: far within a thread's stack. Real
/// selectors have tens of nodes.
const NODES_MAX: usize = 1024;
/// Parentheses and unary operators nested at most. Each level costs the parser about seven
/// stack frames; 64 levels stay far within a thread's stack.
const NESTING_MAX: usize = 64;

/// The expression of `text`, checked to give a boolean. RocketMQ stops at the end of the first
/// complete expression and ignores the rest ("a = 1 b" selects as "a = 1"); refusing it here
/// would refuse what RocketMQ takes.
pub(super) fn boolean_expression(text: &str) -> Result<Expr, ParseError> {
    let mut parser = Parser {
        lexer: Lexer { text, at: 0 },
        ahead: VecDeque::new(),
        nodes: 0,
        nesting: 0,
    };
    let expr = parser.or_expression()?;
    parser.as_boolean(expr, 0)
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
                    self.text_test(&operator, left, negated, at)?
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
                    self.in_list(left, negated, at)?
                }
                _ => return Ok(left),
            };
        }
    }

    /// `left CONTAINS 'x'` (or STARTSWITH, ENDSWITH, each maybe NOT), the operator taken.
    fn text_test(
        &mut self,
        operator: &Token,
        left: Expr,
        negated: bool,
        at: usize,
    ) -> Result<Expr, ParseError> {
        let test = match operator {
            Token::Contains => TextTest::Contains,
            Token::StartsWith => TextTest::StartsWith,
            _ => TextTest::EndsWith,
        };
        let search = self.string_literal()?;
        let operand = Box::new(left);
        let text = Expr::Text {
            test,
            negated,
            operand,
            search,
        };
        self.node(text, at)
    }

    /// `property IN ('a', 'b')` (maybe NOT), IN taken: only a property on the left, only
    /// string literals in the list.
    fn in_list(&mut self, left: Expr, negated: bool, at: usize) -> Result<Expr, ParseError> {
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
        let in_list = Expr::In {
            property,
            list,
            negated,
        };
        self.node(in_list, at)
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
