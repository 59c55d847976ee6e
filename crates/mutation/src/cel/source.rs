//! The source text of an expression: the token pass before parsing, and the excerpts and
//! bounded displays that messages quote, never more than a short piece of a value.

use std::fmt::{self, Write as _};

use cel::parser::pratt_parser::{Lexer, TokenKind};

use super::limits::{EXCERPT, MAX_CHAIN, MAX_NESTING, MAX_SCANNED_DEPTH};
use crate::value::{floor_char, short};

/// One pass over the tokens, before parsing: refuses nesting the parser would recurse
/// into, postfix chains it would copy quadratically, and operator runs that would make
/// an AST too deep to walk (so even a refused AST is shallow enough to drop anywhere).
pub(super) fn scan_tokens(source: &str) -> Result<(), String> {
    let mut lexer = Lexer::new(source);
    let mut scan = Scan {
        source,
        levels: vec![Level::default()],
        questions: 0,
        after_operand: false,
    };
    for _ in 0..=source.len() {
        let token = lexer.lex();
        match token.kind {
            TokenKind::TokEnd | TokenKind::TokError => return Ok(()),
            TokenKind::TokWhitespace | TokenKind::TokComment => continue,
            kind => scan.token(kind, token.start)?,
        }
    }
    Ok(())
}

/// What is open at one bracket level, since its last comma.
#[derive(Default)]
struct Level {
    questions: usize,
    chain: usize,
    longest_chain: usize,
    operators: usize,
    unary: usize,
    longest_unary: usize,
}

// === impl Level ===

impl Level {
    /// An upper bound of the AST depth this level adds.
    fn depth(&self) -> usize {
        1 + self.questions + self.longest_chain + self.operators + self.longest_unary
    }
}

/// The token pass's state: the open bracket levels (the outermost stays), the `?`
/// open over all of them, and whether the last token ended an operand.
struct Scan<'s> {
    source: &'s str,
    levels: Vec<Level>,
    questions: usize,
    after_operand: bool,
}

// === impl Scan ===

impl Scan<'_> {
    /// Takes one token that is neither the end, whitespace nor a comment.
    fn token(&mut self, kind: TokenKind, start: usize) -> Result<(), String> {
        let after_operand = self.after_operand;
        let mut operand = false;
        match kind {
            TokenKind::TokLeftParen | TokenKind::TokLeftBracket | TokenKind::TokLeftBrace => {
                // After an operand, `[` is an index: one more link of the chain.
                self.open(kind == TokenKind::TokLeftBracket && after_operand, start)?;
            }
            TokenKind::TokRightParen | TokenKind::TokRightBracket | TokenKind::TokRightBrace => {
                self.close();
                operand = true;
            }
            TokenKind::TokComma => {
                let level = self.levels.last_mut().expect("the outermost level stays");
                self.questions -= level.questions;
                *level = Level::default();
            }
            TokenKind::TokQuestion => self.question(start)?,
            TokenKind::TokDot => {
                let level = self.level();
                level.chain += 1;
                level.longest_chain = level.longest_chain.max(level.chain);
                if level.chain > MAX_CHAIN {
                    return Err(too_long_chain(self.source, start));
                }
            }
            TokenKind::TokNull
            | TokenKind::TokTrue
            | TokenKind::TokFalse
            | TokenKind::TokInt
            | TokenKind::TokUint
            | TokenKind::TokFloat
            | TokenKind::TokString
            | TokenKind::TokBytes
            | TokenKind::TokIdent
            | TokenKind::TokReservedWord => {
                operand = true;
                self.level().unary = 0;
            }
            // `&&` and `||` chains are balanced; `:` ends a branch.
            TokenKind::TokLogicalAnd | TokenKind::TokLogicalOr | TokenKind::TokColon => {
                self.level().chain = 0;
            }
            TokenKind::TokExclamation | TokenKind::TokMinus if !after_operand => {
                let level = self.level();
                level.unary += 1;
                level.longest_unary = level.longest_unary.max(level.unary);
            }
            // A binary operator starts a new operand, and so a new chain.
            _ => {
                let level = self.level();
                level.chain = 0;
                level.operators += 1;
            }
        }
        if self.levels.iter().map(Level::depth).sum::<usize>() > MAX_SCANNED_DEPTH {
            return Err(format!(
                "the CEL expression is too deeply built (more than {MAX_SCANNED_DEPTH} \
                 operators, selections and conditions inside one another), at {}",
                excerpt_at(self.source, start)
            ));
        }
        self.after_operand = operand;
        Ok(())
    }

    /// The innermost open level.
    fn level(&mut self) -> &mut Level {
        self.levels.last_mut().expect("the outermost level stays")
    }

    /// `(`, `[` or `{` at `start`; `index`: a `[` after an operand.
    fn open(&mut self, index: bool, start: usize) -> Result<(), String> {
        let depth = self.levels.len();
        let level = self.level();
        if index {
            level.chain += 1;
            if level.chain > MAX_CHAIN {
                return Err(too_long_chain(self.source, start));
            }
        }
        level.longest_chain = level.longest_chain.max(level.chain);
        level.unary = 0;
        if depth + self.questions >= MAX_NESTING {
            return Err(too_deep(self.source, start));
        }
        self.levels.push(Level::default());
        Ok(())
    }

    /// `)`, `]` or `}`: the innermost level closes (the outermost stays).
    fn close(&mut self) {
        if self.levels.len() > 1 {
            let closed = self.levels.pop().expect("more than one");
            self.questions -= closed.questions;
        }
    }

    /// `?` at `start`.
    fn question(&mut self, start: usize) -> Result<(), String> {
        let depth = self.levels.len();
        let level = self.level();
        level.questions += 1;
        level.chain = 0;
        self.questions += 1;
        if depth + self.questions >= MAX_NESTING {
            return Err(too_deep(self.source, start));
        }
        Ok(())
    }
}

fn too_deep(source: &str, offset: usize) -> String {
    format!(
        "the CEL expression nests brackets or conditions more than {MAX_NESTING} deep, at {}",
        excerpt_at(source, offset)
    )
}

fn too_long_chain(source: &str, offset: usize) -> String {
    format!(
        "the CEL expression chains more than {MAX_CHAIN} selections, calls or indexes, at {}",
        excerpt_at(source, offset)
    )
}

/// The first parse error, with a short excerpt of the source around it.
pub(super) fn parse_error(source: &str, errors: &cel::ParseErrors) -> String {
    let Some(first) = errors.errors.first() else {
        return "the CEL expression does not compile".into();
    };
    let message = short(&first.msg, EXCERPT);
    let (line, column) = first.pos;
    if line < 1 || column < 1 {
        return format!("the CEL expression does not compile: {message}");
    }
    let offset = source
        .split_inclusive('\n')
        .take(line as usize - 1)
        .map(str::len)
        .sum::<usize>()
        + (column as usize - 1);
    format!(
        "the CEL expression does not compile: {message}, at {}",
        excerpt_at(source, offset)
    )
}

/// `line L, column C near "…excerpt…"` for a byte offset of `source`.
fn excerpt_at(source: &str, offset: usize) -> String {
    let offset = floor_char(source, offset.min(source.len()));
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    let start = floor_char(source, offset.saturating_sub(EXCERPT / 2));
    let end = floor_char(source, (start + EXCERPT).min(source.len()));
    let text: String = source[start..end]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let open = if start > 0 { "…" } else { "" };
    let close = if end < source.len() { "…" } else { "" };
    format!("line {line}, column {column}, near \"{open}{text}{close}\"")
}

/// At most `max` bytes of `value`'s display, without formatting the rest of it.
pub(super) fn bounded_display(value: &dyn fmt::Display, max: usize) -> String {
    struct Bounded {
        out: String,
        max: usize,
    }
    impl fmt::Write for Bounded {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let room = self.max.saturating_sub(self.out.len());
            if s.len() <= room {
                self.out.push_str(s);
                Ok(())
            } else {
                self.out.push_str(&s[..floor_char(s, room)]);
                Err(fmt::Error)
            }
        }
    }
    let mut bounded = Bounded {
        out: String::new(),
        max: max * 2,
    };
    let _ = write!(bounded, "{value}");
    short(&bounded.out, max)
}
