//! Terminal tables that fit the width, and function names as tables show
//! them.
//!
//! **Width.** Every terminal table fits [`width`]: `COLUMNS` where it is
//! set, else the terminal's width where standard output is one, else
//! [`DEFAULT_WIDTH`] (100). A [`Grid`] gives its names column what the
//! other columns leave; where even the numbers do not fit, the columns are
//! folded: the table is printed in parts, each repeating its first (key)
//! column, the names in a part of their own. `--wide` leaves names whole
//! (the lines may then be wider).
//!
//! **Names.** [`short_names`] shortens function names from the right
//! place: a C name is kept whole (where it is longer than its column,
//! cut at its end; two cut alike keep head and tail, `_raw_spin…tore`);
//! a demangled C++ (or Rust) name is cut
//! down to its own name: the return type, parameter list, template
//! arguments and leading namespaces go, the last component stays with the
//! lambdas inside it (`at::native::(anonymous
//! namespace)::cpu_kernel_vec<…>::{lambda()#1}` → `cpu_kernel_vec::λ1`),
//! and a callback whose template argument names the code it calls (torch's
//! `c10::function_ref<…>::callback_fn<…add_kernel…>`) reads as
//! `callback_fn<add_kernel::λ1::λ7::λ1>`. Where two functions of one table
//! would read alike, scope is added back (the enclosing namespace or
//! class, then the parameter list) until they differ, and as a last resort
//! a short hash of the full name. Nothing is ever cut from the left: a
//! name too long for its column loses its tail (`…`). [`module_name`] gives
//! the module's file name (`libjpeg.so.62`, `[kernel]`), which tables
//! always show. JSON, CSV, Markdown and `--wide` keep the full names.
//!
//! Hand-written: demanglers render names, none abbreviates them, and
//! inferno's perf collapser (read for comparison, `tidy_generic`) drops
//! only the argument list, keeping the whole scope and the template
//! arguments, which are the long part of a torch kernel's name.

use std::collections::HashMap;

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, ContentArrangement, Table};
use unicode_width::UnicodeWidthStr;

/// The width tables fit where neither `COLUMNS` nor a terminal says one.
pub const DEFAULT_WIDTH: usize = 100;

/// Tables are never fitted to fewer columns than this.
pub const MIN_WIDTH: usize = 40;

/// Names columns are at least this wide where the table can give them
/// room (else they go to a part of the table of their own).
pub const NAME_MIN: usize = 24;

/// The width tables fit: `COLUMNS` where set (a positive number), else the
/// terminal's where standard output is one, else [`DEFAULT_WIDTH`]; never
/// below [`MIN_WIDTH`].
pub fn width() -> usize {
    let from_env = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0);
    let w = from_env
        .or_else(|| Table::new().width().map(usize::from))
        .unwrap_or(DEFAULT_WIDTH);
    w.max(MIN_WIDTH)
}

/// The display width of `s` (its widest line), in terminal columns.
pub fn display_width(s: &str) -> usize {
    s.lines().map(UnicodeWidthStr::width).max().unwrap_or(0)
}

/// `s` cut at its end to at most `max` columns, `…` marking the cut.
pub fn cut_right(s: &str, max: usize) -> String {
    if display_width(s) <= max {
        return s.to_string();
    }
    let mut out = String::new();
    let mut w = 0;
    for c in s.chars() {
        let cw = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if w + cw + 1 > max {
            break;
        }
        w += cw;
        out.push(c);
    }
    out.push('…');
    out
}

/// `s` in at most `max` columns: its head, `…`, and its tail (a third
/// of the room).
fn cut_middle(s: &str, max: usize) -> String {
    if display_width(s) <= max {
        return s.to_string();
    }
    let cs: Vec<char> = s.chars().collect();
    let tail = (max.saturating_sub(1) / 3).min(cs.len());
    let head = max.saturating_sub(1 + tail).min(cs.len() - tail);
    let mut out: String = cs[..head].iter().collect();
    out.push('…');
    out.extend(&cs[cs.len() - tail..]);
    out
}

/// `line` cut at spaces into lines of at most `width` columns (a word
/// longer than that is cut at its end), the ones after the first indented
/// by two spaces.
pub fn wrap(line: &str, width: usize) -> String {
    let width = width.max(20);
    let mut out = String::new();
    let mut current = String::new();
    for word in line.split(' ') {
        let word = cut_right(word, width - 2);
        let len = display_width(&current);
        if len > 0 && len + 1 + display_width(&word) > width {
            out += &current;
            out.push('\n');
            current = format!("  {word}");
        } else {
            if len > 0 {
                current.push(' ');
            }
            current += &word;
        }
    }
    out + &current
}

/// `line` cut at spaces into lines of at most `width` columns, no indent
/// (a word longer than that is cut at its end).
pub fn wrap_plain(line: &str, width: usize) -> String {
    if display_width(line) <= width {
        return line.to_string();
    }
    // A tree's indent is kept on each line, its mark (`└ `) with the
    // name it marks.
    let body = line.trim_start_matches(' ');
    let indent = &line[..line.len() - body.len()];
    let marked = body.strip_prefix("└ ").map(|rest| format!("└\u{a0}{rest}"));
    let body = marked.as_deref().unwrap_or(body);
    let width = width.saturating_sub(indent.len()).max(8);
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in body.split(' ') {
        let word = cut_right(word, width);
        let len = display_width(&current);
        if len > 0 && len + 1 + display_width(&word) > width {
            lines.push(std::mem::take(&mut current));
        } else if len > 0 {
            current.push(' ');
        }
        current += &word;
    }
    lines.push(current);
    lines
        .iter()
        .map(|l| format!("{indent}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every line of `text` wrapped to `width` ([`wrap`]).
/// Lines that fit are kept as they are; a longer one keeps its indent,
/// its continuation lines two spaces more.
pub fn wrap_lines(text: &str, width: usize) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if display_width(line) <= width {
            out += line;
        } else {
            let body = line.trim_start_matches(' ');
            let indent = &line[..line.len() - body.len()];
            let wrapped = wrap(body, width.saturating_sub(indent.len()));
            for (i, l) in wrapped.lines().enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                out += indent;
                out += l;
            }
        }
        out.push('\n');
    }
    out
}

/// The file name of a module, as tables show it: `libjpeg.so.62` for
/// `/usr/lib/x86_64-linux-gnu/libjpeg.so.62`, `[kernel]` for the kernel
/// (`[kernel.kallsyms]` too), `?` where unknown.
pub fn module_name(module: &str) -> String {
    let m = module.trim();
    if m.is_empty() || m.eq_ignore_ascii_case("[unknown]") {
        return "?".into();
    }
    if m.starts_with("[kernel") {
        return "[kernel]".into();
    }
    m.rsplit('/')
        .find(|s| !s.is_empty())
        .unwrap_or(m)
        .to_string()
}

/// Whether `name` is a plain C name (no scope, template or parameters).
fn is_c_name(name: &str) -> bool {
    !name.contains("::") && !name.contains('<') && !name.contains('(')
}

/// Each of `names` as a table shows it in at most `max` columns (see the
/// module's rules); distinct names stay distinct. `usize::MAX`: the names
/// whole (`--wide`).
pub fn short_names(names: &[&str], max: usize) -> Vec<String> {
    if max == usize::MAX {
        return names.iter().map(|n| n.to_string()).collect();
    }
    let max = max.max(12);
    let mut level = vec![0usize; names.len()];
    let shown = |i: usize, level: usize| fit_name(names[i], level, max);
    let mut short: Vec<String> = (0..names.len()).map(|i| shown(i, 0)).collect();
    for _ in 0..LEVELS {
        let clashing = clashes(names, &short);
        if clashing.is_empty() {
            return short;
        }
        for i in clashing {
            level[i] += 1;
            short[i] = shown(i, level[i]);
        }
    }
    // C names cut alike at their end: their heads and tails, the middle
    // elided (`_raw_spin…irqrestore`).
    for i in clashes(names, &short) {
        if is_c_name(names[i]) {
            short[i] = cut_middle(names[i], max);
        }
    }
    // Still alike: their own names, told apart by a hash of the full name.
    for i in clashes(names, &short) {
        let tag = format!(" #{:06x}", fnv1a(names[i]) & 0xff_ffff);
        short[i] = fit_name(names[i], 0, max.saturating_sub(tag.len())) + &tag;
    }
    short
}

/// Indexes of the names whose short form another, different, name shares.
fn clashes(names: &[&str], short: &[String]) -> Vec<usize> {
    let mut by_short: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, s) in short.iter().enumerate() {
        by_short.entry(s.as_str()).or_default().push(i);
    }
    let mut out: Vec<usize> = by_short
        .values()
        .filter(|idx| idx.iter().any(|&i| names[i] != names[idx[0]]))
        .flatten()
        .copied()
        .collect();
    out.sort_unstable();
    out
}

/// How many levels of detail [`short_at`] has past the first.
const LEVELS: usize = 3;

/// `name` at detail `level`, fitted to `max` columns: the callback form
/// falls back to the code it calls, then the tail is cut.
fn fit_name(name: &str, level: usize, max: usize) -> String {
    if is_c_name(name) {
        return cut_right(name, max);
    }
    let candidates = short_at(name, level);
    for c in &candidates {
        if display_width(c) <= max {
            return c.clone();
        }
    }
    cut_right(candidates.last().map_or(name, String::as_str), max)
}

/// FNV-1a, 64 bits: the same tag in every run and build.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A `::` component of a C++ name: its base (no template arguments or
/// parameters), template arguments and parameter list where it has them.
#[derive(Debug, Clone)]
struct Component {
    base: String,
    targs: Option<String>,
    params: Option<String>,
}

impl Component {
    fn is_lambda(&self) -> bool {
        self.base.starts_with('λ')
    }
}

/// +1 for an opening bracket, -1 for a closing one.
fn depth_change(b: u8) -> i32 {
    match b {
        b'<' | b'(' | b'{' | b'[' => 1,
        b'>' | b')' | b'}' | b']' => -1,
        _ => 0,
    }
}

/// The length of an `operator` token at `i` (`operator<<`, `operator()`).
fn operator_token(s: &[u8], i: usize) -> Option<usize> {
    const OP: &[u8] = b"operator";
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    if !s[i..].starts_with(OP) || (i > 0 && ident(s[i - 1])) {
        return None;
    }
    let mut j = i + OP.len();
    if j < s.len() && ident(s[j]) {
        return None;
    }
    if s[j..].starts_with(b"()") || s[j..].starts_with(b"[]") {
        return Some(j + 2 - i);
    }
    while j < s.len() && b"<>=!+-*/%^&|~,".contains(&s[j]) {
        j += 1;
    }
    Some(j - i)
}

/// Byte ranges of `s` split at `sep` outside brackets; `None` when the
/// brackets do not balance.
fn split_top(s: &str, sep: &str) -> Option<Vec<(usize, usize)>> {
    let b = s.as_bytes();
    let mut parts = Vec::new();
    let (mut depth, mut start, mut i) = (0i32, 0usize, 0usize);
    while i < b.len() {
        if let Some(skip) = operator_token(b, i) {
            i += skip;
            continue;
        }
        let c = depth_change(b[i]);
        if c == 0 && depth == 0 && b[i..].starts_with(sep.as_bytes()) {
            parts.push((start, i));
            i += sep.len();
            start = i;
            continue;
        }
        depth += c;
        if depth < 0 {
            return None;
        }
        i += 1;
    }
    (depth == 0).then(|| {
        parts.push((start, b.len()));
        parts
    })
}

/// The end (exclusive) of the bracket group opening at `open`.
fn close(s: &str, open: usize) -> Option<usize> {
    let b = s.as_bytes();
    let (mut depth, mut i) = (0i32, open);
    while i < b.len() {
        if let Some(skip) = operator_token(b, i) {
            i += skip;
            continue;
        }
        depth += depth_change(b[i]);
        if depth == 0 {
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

/// The components of a demangled name, its return type, qualifiers and
/// clone or version suffix gone; `None` where it does not parse.
fn components(name: &str) -> Option<Vec<Component>> {
    let name = match name.find(" [clone ") {
        Some(at) => &name[..at],
        None => name,
    };
    let name = name.trim().replace(") const::", ")::");
    let tokens: Vec<&str> = split_top(&name, " ")?
        .into_iter()
        .map(|(a, b)| &name[a..b])
        .filter(|t| !t.is_empty())
        .collect();
    let mut last = tokens.len().checked_sub(1)?;
    while last > 0 && matches!(tokens[last], "const" | "volatile" | "&" | "&&" | "noexcept") {
        last -= 1;
    }
    let first = if last > 0 && tokens[last - 1].ends_with("operator") {
        last - 1
    } else {
        last
    };
    let qualified = tokens[first..=last].join(" ");
    let mut out: Vec<Component> = Vec::new();
    for (a, b) in split_top(&qualified, "::")? {
        let c = qualified[a..b].trim();
        if c.is_empty() || c == "(anonymous namespace)" {
            continue;
        }
        if let Some(rest) = c.strip_prefix("{lambda(") {
            // `{lambda(float)#1}`, possibly followed by `&` or `&&`.
            let n: String = rest.rfind('#').map_or(String::new(), |h| {
                rest[h + 1..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect()
            });
            out.push(Component {
                base: format!("λ{n}"),
                targs: None,
                params: None,
            });
            continue;
        }
        if c.starts_with("operator()") && out.last().is_some_and(Component::is_lambda) {
            continue; // a lambda's call operator: the lambda names it
        }
        out.push(component(c)?);
    }
    (!out.is_empty()).then_some(out)
}

/// One component split into base, template arguments and parameters.
fn component(c: &str) -> Option<Component> {
    let b = c.as_bytes();
    let mut i = 0;
    let (mut base_end, mut targs, mut params) = (None, None, None);
    while i < b.len() {
        if let Some(skip) = operator_token(b, i) {
            i += skip;
            continue;
        }
        match b[i] {
            b'<' if targs.is_none() && params.is_none() => {
                let end = close(c, i)?;
                base_end.get_or_insert(i);
                targs = Some(c[i + 1..end - 1].to_string());
                i = end;
                continue;
            }
            b'(' => {
                let end = close(c, i)?;
                base_end.get_or_insert(i);
                params = Some(c[i..end].to_string());
                break;
            }
            b'{' | b'[' => {
                i = close(c, i)?;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    Some(Component {
        base: c[..base_end.unwrap_or(c.len())].trim().to_string(),
        targs,
        params,
    })
}

/// The forms of `name` at detail `level`, most telling first (a callback's
/// form, then the code it calls alone): level 0 its own name (the last
/// named component and the lambdas inside it), 1 with the scope before it,
/// 2 with the whole scope and the parameter list, 3 the full name.
fn short_at(name: &str, level: usize) -> Vec<String> {
    if level >= LEVELS {
        return vec![name.to_string()];
    }
    let Some(parts) = components(name) else {
        return vec![name.to_string()];
    };
    // The last component that is not a lambda: the function's own name.
    let own = parts.iter().rposition(|c| !c.is_lambda()).unwrap_or(0);
    let scope_from = match level {
        0 => own,
        1 => own.saturating_sub(1),
        _ => 0,
    };
    let lambdas: String = parts[own + 1..]
        .iter()
        .map(|c| format!("::{}", c.base))
        .collect();
    let scope: String = parts[scope_from..own]
        .iter()
        .map(|c| format!("{}::", c.base))
        .collect();
    let f = &parts[own];
    let params = if level >= 2 {
        f.params.clone().unwrap_or_default()
    } else {
        String::new()
    };
    // A template argument naming code (a lambda or a torch kernel): the
    // callback is known by it.
    let inner = f.targs.as_deref().and_then(|t| {
        let args = split_top(t, ",")?;
        args.iter()
            .map(|&(a, b)| t[a..b].trim())
            .find(|a| a.contains("{lambda") || a.contains("at::native::"))
            .map(|a| innermost(a, level))
    });
    let own_name = format!("{scope}{}{params}{lambdas}", f.base);
    match inner {
        Some(inner) => vec![format!("{own_name}<{inner}>"), inner],
        None => vec![own_name],
    }
}

/// The code a template argument names, through wrappers
/// (`VectorizedLoop2d<add_kernel::λ1…>` → `add_kernel::λ1…`).
fn innermost(arg: &str, level: usize) -> String {
    let forms = short_at(arg, level.min(1));
    forms.last().cloned().unwrap_or_else(|| arg.to_string())
}

/// A column of a [`Grid`]: its header and whether its cells are numbers
/// (aligned right).
#[derive(Debug, Clone)]
pub struct Column {
    /// The header.
    pub header: String,
    /// Aligned right.
    pub right: bool,
}

impl Column {
    /// A text column.
    pub fn left(header: &str) -> Column {
        Column {
            header: header.into(),
            right: false,
        }
    }

    /// A number column.
    pub fn right(header: &str) -> Column {
        Column {
            header: header.into(),
            right: true,
        }
    }
}

/// The cells of a names column for a given room (columns): one per row.
type NamesFn<'a> = Box<dyn Fn(usize) -> Vec<String> + 'a>;

/// A table to be fitted to a width: its first column is the key (repeated
/// when the table is folded), one column may hold names, drawn for the
/// room the others leave.
pub struct Grid<'a> {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
    names: Option<Names<'a>>,
}

/// A [`Grid`]'s names column, and the columns that go with it.
struct Names<'a> {
    column: usize,
    companions: usize,
    min: usize,
    cells: NamesFn<'a>,
}

/// The columns one table of `widths` takes, borders included
/// (UTF8_FULL_CONDENSED: `│ a ┆ b │`).
fn drawn(widths: &[usize]) -> usize {
    1 + widths.iter().map(|w| w + 3).sum::<usize>()
}

impl<'a> Grid<'a> {
    /// A table of these columns and rows (each row a cell per column; the
    /// names column's cells, where there is one, are ignored).
    pub fn new(columns: Vec<Column>, rows: Vec<Vec<String>>) -> Grid<'a> {
        Grid {
            columns,
            rows,
            names: None,
        }
    }

    /// Column `column` holds names: `cells(room)` gives its cells for a
    /// room of `room` columns, `usize::MAX` for the names whole; it gets
    /// at least `min` columns (in a part of its own, with the key and its
    /// `companions` columns after it, where the others leave less).
    pub fn names(
        mut self,
        column: usize,
        companions: usize,
        min: usize,
        cells: impl Fn(usize) -> Vec<String> + 'a,
    ) -> Self {
        self.names = Some(Names {
            column,
            companions,
            min,
            cells: Box::new(cells),
        });
        self
    }

    /// The table as Markdown, names whole, each cell on one line.
    pub fn markdown(&self) -> String {
        let mut rows = self.rows.clone();
        if let Some(names) = &self.names {
            fill(&mut rows, names.column, (names.cells)(usize::MAX));
        }
        let cell = |c: &str| lotus_sys::text::one_line(&c.replace('\n', ", ")).replace('|', "\\|");
        let mut out = format!(
            "| {} |\n|{}\n",
            self.columns
                .iter()
                .map(|c| cell(&c.header))
                .collect::<Vec<_>>()
                .join(" | "),
            self.columns
                .iter()
                .map(|c| if c.right { "---:|" } else { "---|" })
                .collect::<String>()
        );
        for r in &rows {
            out += &format!(
                "| {} |\n",
                r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
            );
        }
        out
    }

    /// The table drawn in at most `width` columns (`None`: as wide as its
    /// cells, names whole).
    pub fn render(&self, width: Option<usize>) -> String {
        let mut rows = self.rows.clone();
        let n = self.columns.len();
        let all: Vec<usize> = (0..n).collect();
        let Some(width) = width else {
            if let Some(names) = &self.names {
                fill(&mut rows, names.column, (names.cells)(usize::MAX));
            }
            return draw(&self.columns, &rows, &all, None);
        };
        let col_width = |rows: &[Vec<String>], c: usize| {
            rows.iter()
                .map(|r| display_width(&r[c]))
                .chain([display_width(&self.columns[c].header)])
                .max()
                .unwrap_or(0)
        };
        // The key column gives up what the table lacks to fit the width
        // (its cells wrapped at spaces), down to a sixth of the width;
        // where that is not enough the table is folded.
        let key_max = {
            let natural: Vec<usize> = (0..n).map(|c| col_width(&rows, c)).collect();
            let group = self
                .names
                .as_ref()
                .filter(|names| names.column > 0)
                .map(|names| names.column..=names.column + names.companions);
            let fixed: Vec<usize> = (0..n)
                .filter(|c| !group.as_ref().is_some_and(|g| g.contains(c)))
                .map(|c| natural[c])
                .collect();
            let mut need = drawn(&fixed);
            // Never so narrow that a word of a key (an op's name with its
            // tree mark) would be cut.
            let longest_word = rows
                .iter()
                .flat_map(|r| r[0].lines())
                .flat_map(|l| {
                    l.trim_start()
                        .replace("└ ", "└\u{a0}")
                        .split(' ')
                        .map(display_width)
                        .collect::<Vec<_>>()
                })
                .max()
                .unwrap_or(0);
            let floor = (width / 6).max(12).max(longest_word).min(natural[0]);
            if let (Some(names), Some(g)) = (&self.names, &group) {
                let with: usize = need
                    + names.min
                    + 3
                    + g.clone()
                        .skip(1)
                        .filter(|&c| c < n)
                        .map(|c| natural[c] + 3)
                        .sum::<usize>();
                if with <= width + natural[0] - floor {
                    need = with;
                }
            }
            if need > width + natural[0] - floor {
                // Folded whatever the key gives up: it keeps its width
                // (up to two fifths of the line).
                natural[0].min(width * 2 / 5)
            } else {
                natural[0].saturating_sub(need.saturating_sub(width))
            }
        };
        match &self.names {
            Some(names) if names.column == 0 => {
                // The names are the key: they get what the others leave.
                let others: usize = (1..n)
                    .map(|c| {
                        rows.iter()
                            .map(|r| display_width(&r[c]))
                            .chain([display_width(&self.columns[c].header)])
                            .max()
                            .unwrap_or(0)
                    })
                    .sum();
                // Where the others leave too little, the table is folded
                // and the names get two fifths of the width.
                let mut room = width.saturating_sub(1 + 3 * n + others);
                if room < names.min {
                    room = room.max(width * 2 / 5);
                }
                fill(&mut rows, 0, (names.cells)(room));
            }
            _ => {
                for r in &mut rows {
                    r[0] = r[0]
                        .lines()
                        .map(|l| wrap_plain(l, key_max))
                        .collect::<Vec<_>>()
                        .join("\n");
                }
            }
        }
        let widths: Vec<usize> = (0..n).map(|c| col_width(&rows, c)).collect();
        let Some(names) = self.names.as_ref().filter(|names| names.column > 0) else {
            return self.fold(&rows, &widths, &all, width);
        };
        let group: Vec<usize> = (names.column..=names.column + names.companions)
            .filter(|&c| c < n)
            .collect();
        let others: usize = all
            .iter()
            .filter(|&&c| c != names.column)
            .map(|&c| widths[c])
            .sum();
        let room = width.saturating_sub(1 + 3 * n + others);
        if room >= names.min {
            fill(&mut rows, names.column, (names.cells)(room));
            return draw(&self.columns, &rows, &all, Some(width));
        }
        // Folded: the other columns, then the key with the names.
        let fixed: Vec<usize> = all.iter().copied().filter(|c| !group.contains(c)).collect();
        let mut out = self.fold(&rows, &widths, &fixed, width);
        let mut part = vec![0];
        part.extend(&group);
        // In the names' part the key is narrow (a quarter of the width,
        // wrapped at spaces): the names are what that part is for.
        let key = (width / 4).max(14);
        for (r, original) in rows.iter_mut().zip(&self.rows) {
            r[0] = original[0]
                .lines()
                .map(|l| wrap_plain(l, key))
                .collect::<Vec<_>>()
                .join("\n");
        }
        let key_width = col_width(&rows, 0);
        let companions: usize = group[1..].iter().map(|&c| widths[c] + 3).sum();
        let room = width
            .saturating_sub(1 + 3 + key_width + 3 + companions)
            .max(12);
        fill(&mut rows, names.column, (names.cells)(room));
        out += &draw(&self.columns, &rows, &part, Some(width));
        out
    }

    /// The columns `fixed` (the key first) in as many parts as the width
    /// needs, each repeating the key.
    fn fold(
        &self,
        rows: &[Vec<String>],
        widths: &[usize],
        fixed: &[usize],
        width: usize,
    ) -> String {
        let mut parts: Vec<Vec<usize>> = Vec::new();
        let mut part = vec![0usize];
        for &c in fixed.iter().filter(|&&c| c != 0) {
            let mut with: Vec<usize> = part.iter().map(|&i| widths[i]).collect();
            with.push(widths[c]);
            if part.len() > 1 && drawn(&with) > width {
                parts.push(std::mem::replace(&mut part, vec![0, c]));
            } else {
                part.push(c);
            }
        }
        if part.len() > 1 || parts.is_empty() {
            parts.push(part);
        }
        parts
            .iter()
            .map(|p| draw(&self.columns, rows, p, Some(width)))
            .collect()
    }
}

/// Puts `cells` into column `col` of `rows`.
fn fill(rows: &mut [Vec<String>], col: usize, cells: Vec<String>) {
    for (r, c) in rows.iter_mut().zip(cells) {
        r[col] = c;
    }
}

/// Draws columns `which` of `rows`; with a width, comfy-table wraps what
/// still does not fit (a single cell wider than the line).
fn draw(columns: &[Column], rows: &[Vec<String>], which: &[usize], width: Option<usize>) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    match width {
        Some(w) => {
            t.set_content_arrangement(ContentArrangement::Dynamic)
                .set_width(u16::try_from(w).unwrap_or(u16::MAX));
        }
        None => {
            t.set_content_arrangement(ContentArrangement::Disabled);
        }
    }
    t.set_header(which.iter().map(|&c| columns[c].header.clone()));
    for r in rows {
        t.add_row(which.iter().map(|&c| {
            let cell = Cell::new(&r[c]);
            if columns[c].right {
                cell.set_alignment(CellAlignment::Right)
            } else {
                cell
            }
        }));
    }
    t.to_string() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_names_stay_whole_and_cpp_names_are_cut_to_their_own_name() {
        assert_eq!(
            short_names(&["__memmove_avx512_unaligned_erms"], 40),
            ["__memmove_avx512_unaligned_erms"]
        );
        // Too long for its room: cut at its end, never its start.
        assert_eq!(
            short_names(&["__memmove_avx512_unaligned_erms"], 20),
            ["__memmove_avx512_un…"]
        );
        let kernel = "void at::native::(anonymous namespace)::cpu_kernel_vec<at::TensorIteratorBase&, float (float)>(at::TensorIteratorBase&, float (float)&&)::{lambda()#1}::operator()() const";
        assert_eq!(short_names(&[kernel], 60), ["cpu_kernel_vec::λ1"]);
        let cb = "void c10::function_ref<void (char**, long const*, long, long)>::callback_fn<at::native::AVX2::VectorizedLoop2d<at::native::(anonymous namespace)::add_kernel(at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float, float)#1}, at::native::(anonymous namespace)::add_kernel(at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(at::vec::AVX2::Vectorized<float>, at::vec::AVX2::Vectorized<float>)#1}> >(long, char**, long const*, long, long)";
        assert_eq!(
            short_names(&[cb], 60),
            ["callback_fn<add_kernel::λ1::λ7::λ1>"]
        );
        assert_eq!(short_names(&[cb], 24), ["add_kernel::λ1::λ7::λ1"]);
        assert_eq!(
            short_names(&["at::TensorBase::sizes() const"], 40),
            ["sizes"]
        );
        // C names that would read alike keep their tails too.
        assert_eq!(
            short_names(&["_raw_spin_unlock_irqrestore", "_raw_spin_unlock_irq"], 14),
            ["_raw_spin…tore", "_raw_spin…_irq"]
        );
        // Never cut from the left.
        let long = format!("ns::{}", "x".repeat(60));
        let s = &short_names(&[&long], 30)[0];
        assert!(s.starts_with("xxx") && s.ends_with('…'), "{s}");
    }

    #[test]
    fn alike_names_get_their_scope_back() {
        let a = "at::native::AVX2::copy_kernel(at::TensorIterator&, bool)";
        let b = "at::native::AVX512::copy_kernel(at::TensorIterator&, bool)";
        assert_eq!(
            short_names(&[a, b, a], 60),
            [
                "AVX2::copy_kernel",
                "AVX512::copy_kernel",
                "AVX2::copy_kernel"
            ]
        );
        let o1 = "c10::TensorImpl::TensorImpl(c10::Storage&&)";
        let o2 = "c10::TensorImpl::TensorImpl(int)";
        let s = short_names(&[o1, o2], 80);
        assert_ne!(s[0], s[1]);
        assert!(s.iter().all(|x| x.contains("TensorImpl(")), "{s:?}");
    }

    #[test]
    fn the_in_pipeline_numbers_and_one_more_column_fit_80_in_one_part() {
        // `attribute DIR`'s columns with a wall-time column added (the
        // verdict's `wall ms`): at 80 columns the numbers stay in one
        // part (the row names wrap), the functions go to their own.
        let headers = [
            "samples",
            "CPU ms ±95%",
            "CPU %",
            "calls",
            "ms/call",
            "wall ms",
        ];
        let mut columns = vec![Column::left("row")];
        columns.extend(headers.iter().map(|h| Column::right(h)));
        columns.extend([
            Column::left("function"),
            Column::left("module"),
            Column::right("%"),
        ]);
        let row = |name: &str| {
            let mut r = vec![name.to_string()];
            r.extend(
                ["5243", "5243.0 ±141.9", "82.6", "128", "10.793", "1234.5"].map(String::from),
            );
            r.extend([String::new(), "libpython3.11.so.…".into(), "14%".into()]);
            r
        };
        let rows = vec![
            row("independent threads (worker)"),
            row("outside any op (main)"),
        ];
        let names = vec!["gc_collect_main".to_string(); 2];
        let text = Grid::new(columns, rows)
            .names(7, 2, NAME_MIN, |room| {
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                short_names(&refs, room)
            })
            .render(Some(80));
        assert!(text.lines().all(|l| display_width(l) <= 80), "{text}");
        let first_header = text.lines().nth(1).unwrap_or("");
        for h in headers {
            assert!(
                first_header.contains(h),
                "{h} not in the first part:\n{text}"
            );
        }
        assert!(text.contains("gc_collect_main"), "{text}");
    }

    #[test]
    fn keys_are_wrapped_at_spaces() {
        assert_eq!(
            wrap_plain("independent threads (worker)", 16),
            "independent\nthreads (worker)"
        );
        assert_eq!(wrap_plain("  └ Normalize", 16), "  └ Normalize");
        assert_eq!(
            wrap_plain("└ RandomResizedCrop", 16),
            "└\u{a0}RandomResized…"
        );
    }

    #[test]
    fn modules_are_shown_by_their_file_name() {
        assert_eq!(
            module_name("/usr/lib/x86_64-linux-gnu/libjpeg.so.62"),
            "libjpeg.so.62"
        );
        assert_eq!(module_name("[kernel.kallsyms]"), "[kernel]");
        assert_eq!(module_name("[Unknown]"), "?");
        assert_eq!(module_name("/a/cv2.abi3.so"), "cv2.abi3.so");
    }

    #[test]
    fn a_grid_fits_by_shortening_names_then_by_folding_columns() {
        let names = ["at::native::AVX2::some_long_kernel_name(int)".to_string()];
        let columns = vec![
            Column::left("op"),
            Column::right("a"),
            Column::right("b"),
            Column::left("functions"),
        ];
        let rows = vec![vec![
            "Normalize".to_string(),
            "12345.678".to_string(),
            "99.9".to_string(),
            String::new(),
        ]];
        let grid = Grid::new(columns.clone(), rows.clone()).names(3, 0, 24, |room| {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            short_names(&refs, room)
        });
        for w in [40, 60, 80, 120] {
            let text = grid.render(Some(w));
            assert!(text.lines().all(|l| display_width(l) <= w), "{w}:\n{text}");
            assert!(text.contains("some_long_kernel_name"), "{w}:\n{text}");
        }
        let whole = grid.render(None);
        assert!(whole.contains(names[0].as_str()), "{whole}");
        // Many number columns: folded, the key in every part.
        let many: Vec<Column> = (0..12).map(|i| Column::right(&format!("col{i}"))).collect();
        let mut cols = vec![Column::left("op")];
        cols.extend(many);
        let row: Vec<String> = std::iter::once("Loader".to_string())
            .chain((0..12).map(|_| "1234.567".to_string()))
            .collect();
        let text = Grid::new(cols, vec![row]).render(Some(80));
        assert!(text.lines().all(|l| display_width(l) <= 80), "{text}");
        assert!(text.matches("Loader").count() >= 2, "{text}");
        assert!(text.contains("col11"), "{text}");
    }
}
