//! Function and module names as tables show them, and the width tables
//! fit: the one rule of every table lotus prints (the binary's, the
//! report page's cells, `lotus_map::output`'s).
//!
//! **Width.** [`table_width`]: `COLUMNS` where it is set, else the
//! terminal's width where standard output is one, else [`DEFAULT_WIDTH`]
//! (100); never below [`MIN_WIDTH`]. Widths are display widths (terminal
//! columns, [`display_width`]): a wide character takes two.
//!
//! **Names.** [`short_names`] shortens function names from the right
//! place: a C name is kept whole (where it is longer than its column,
//! cut at its end; two cut alike keep head and tail, `_raw_spin…tore`);
//! a demangled C++ (or Rust) name is cut down to its own name: the return
//! type, parameter list, template arguments and leading namespaces go,
//! the last component stays with the lambdas inside it
//! (`at::native::(anonymous
//! namespace)::cpu_kernel_vec<…>::{lambda()#1}` → `cpu_kernel_vec::λ1`),
//! and a callback whose template argument names the code it calls
//! (torch's `c10::function_ref<…>::callback_fn<…add_kernel…>`) reads as
//! `callback_fn<add_kernel::λ1::λ7::λ1>`. A PLT stub's `@plt` or a symbol
//! version (`@@GLIBCXX_3.4`) after a C++ name is kept whole after its
//! short form (`add_owned_const_input@plt`): it says which code ran. Where
//! two functions of one table would read alike, scope is added back (the
//! enclosing namespace or class, then the parameter list) until they
//! differ, and as a last resort a short hash of the full name. Nothing is
//! ever cut from the left: a name too long for its column loses its tail
//! (`…`, [`cut_right`]). [`module_name`] gives the module's file name
//! (`libjpeg.so.62`, `[kernel]`), which tables always show. JSON, CSV,
//! Markdown and `--wide` keep the full names.
//!
//! **Text.** [`wrap`], [`wrap_plain`] and [`wrap_lines`] fit the lines
//! around tables to the same width (cut at spaces; written here, not with
//! `textwrap`: a tree's indent and mark are kept on each line, and a word
//! too long is cut with [`cut_right`]'s `…` as the cells are).
//!
//! Hand-written: demanglers render names, none abbreviates them, and
//! inferno's perf collapser (read for comparison, `tidy_generic`) drops
//! only the argument list, keeping the whole scope and the template
//! arguments, which are the long part of a torch kernel's name.

use std::collections::HashMap;

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// The width tables fit where neither `COLUMNS` nor a terminal says one.
pub const DEFAULT_WIDTH: usize = 100;

/// Tables are never fitted to fewer columns than this.
pub const MIN_WIDTH: usize = 40;

/// A name is never shortened to fewer columns than this, however little
/// room its column has.
const MIN_NAME: usize = 12;

/// The width tables fit: `COLUMNS` where set (a positive number), else the
/// terminal's the output is read on (standard output's, or standard
/// error's where the output is piped: `lotus ... | less`), else
/// [`DEFAULT_WIDTH`]; never below [`MIN_WIDTH`].
pub fn table_width() -> usize {
    let from_env = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0);
    let w = from_env
        .or_else(lotus_sys::terminal_columns)
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
        let cw = c.width().unwrap_or(0);
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

/// The file name of a module, as tables show it: `libjpeg.so.62` for
/// `/usr/lib/x86_64-linux-gnu/libjpeg.so.62`, `[kernel]` for the kernel
/// (`[kernel.kallsyms]` too), `?` where unknown.
pub fn module_name(module: &str) -> String {
    let m = module.trim();
    if crate::is_unknown_module(m) {
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

/// One name as a table shows it in at most `max` columns ([`short_names`]
/// of that name alone): for a cell that has no table of names around it
/// (the report page's cells, whose tooltip holds the full name).
pub fn short_name(name: &str, max: usize) -> String {
    short_names(&[name], max)
        .pop()
        .unwrap_or_else(|| name.to_string())
}

/// Whether `name` is a plain C name (no scope, template or parameters).
fn is_c_name(name: &str) -> bool {
    !name.contains("::") && !name.contains('<') && !name.contains('(')
}

/// Each of `names` as a table shows it in at most `max` columns (see the
/// module's rules; never fewer than 12); distinct names stay distinct.
/// `usize::MAX`: the names whole (`--wide`).
pub fn short_names(names: &[&str], max: usize) -> Vec<String> {
    if max == usize::MAX {
        return names.iter().map(|n| n.to_string()).collect();
    }
    let max = max.max(MIN_NAME);
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
    // A PLT stub's `@plt` or a symbol version (`@@GLIBC_2.2.5`) says which
    // code ran (the stub is not its function): kept whole after the name
    // before it, shortened, where it leaves that name half the room.
    // Demangled C++ and Rust names hold no `@` of their own.
    if let Some(at) = name.find('@').filter(|&at| at > 0) {
        let (base, suffix) = name.split_at(at);
        let room = max.saturating_sub(display_width(suffix));
        if room >= max / 2 {
            return fit_name(base, level, room) + suffix;
        }
    }
    // A row's name (`start-up and imports (worker)`) is not a function's:
    // where the rules find no name in it, it is shown as it is.
    let candidates: Vec<String> = short_at(name, level)
        .into_iter()
        .filter(|c| !c.trim().is_empty())
        .collect();
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

#[cfg(test)]
mod tests;
