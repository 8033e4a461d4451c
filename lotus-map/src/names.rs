//! Readable function names for tables: long C++ names (torch's kernels
//! run to a thousand characters) shortened so that the table fits the
//! terminal and distinct functions stay distinct. JSON and CSV keep the
//! full names; `--wide` shows them in tables too.
//!
//! A name is shortened in steps, each taken only while the name is still
//! too long: (1) parameter lists, return types and `const` go, template
//! arguments collapse to `<…>` except one naming an `at::native` kernel,
//! which is kept as the kernel's own name (its lambdas as `λN`); (2)
//! namespaces in the middle are elided (`c10::…::callback_fn<…>`), then
//! all of them; (3) the head of what is left is cut. [`shorten_all`] then gives the
//! names that still collide a short hash of the full name, so that no two
//! rows of a table read the same. Hand-written: no crate shortens
//! demangled C++ names (demanglers render, they do not abbreviate).

use std::collections::HashMap;

/// Where the terminal width cannot be known (output to a file or pipe,
/// no `COLUMNS`): the width tables are made to fit.
pub const DEFAULT_WIDTH: usize = 120;

/// Names are never cut below this many characters, however narrow the
/// terminal.
pub const MIN_NAME_WIDTH: usize = 24;

/// The width tables should fit: the terminal's when standard output is
/// one, else `$COLUMNS` when set, else [`DEFAULT_WIDTH`].
pub fn table_width() -> usize {
    if let Some(w) = comfy_table::Table::new().width() {
        return usize::from(w);
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
        .unwrap_or(DEFAULT_WIDTH)
}

/// `name` shortened to at most `max` characters (see the module's steps).
/// Names that fit are returned as they are.
pub fn shorten(name: &str, max: usize) -> String {
    shorten_to(name, max.max(MIN_NAME_WIDTH))
}

/// [`shorten`] without the floor of [`MIN_NAME_WIDTH`].
fn shorten_to(name: &str, max: usize) -> String {
    if chars(name) <= max {
        return name.to_string();
    }
    // A PLT stub's `@plt` or a symbol version (`@@GLIBC_2.2.5`) says which
    // code ran (the stub is not its function): the suffix is kept whole
    // and the name before it shortened. Demangled C++ and Rust names hold
    // no `@` of their own.
    if let Some(at) = name.find('@').filter(|&at| at > 0) {
        let (base, suffix) = name.split_at(at);
        let room = max.saturating_sub(chars(suffix));
        if room >= max / 2 {
            return shorten_to(base, room) + suffix;
        }
    }
    let simple = simplify(name).unwrap_or_else(|| name.to_string());
    if chars(&simple) <= max {
        return simple;
    }
    let elided = elide_namespaces(&simple);
    if chars(&elided) <= max {
        return elided;
    }
    let last = last_component(&simple);
    if chars(&last) <= max {
        return last;
    }
    cut_head(&last, max)
}

/// Each of `names` shortened to at most `max` characters, distinct names
/// staying distinct: where two shorten alike, each gets ` #` and a hash of
/// its full name (or, should even those collide, the full name).
pub fn shorten_all(names: &[&str], max: usize) -> Vec<String> {
    let max = max.max(MIN_NAME_WIDTH);
    let mut short: Vec<String> = names.iter().map(|n| shorten(n, max)).collect();
    for _ in 0..2 {
        let mut by_short: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, s) in short.iter().enumerate() {
            by_short.entry(s.as_str()).or_default().push(i);
        }
        let clashing: Vec<usize> = by_short
            .values()
            .filter(|idx| idx.iter().any(|&i| names[i] != names[idx[0]]))
            .flatten()
            .copied()
            .collect();
        if clashing.is_empty() {
            return short;
        }
        for i in clashing {
            let tag = format!(" #{:06x}", fnv1a(names[i]) & 0xff_ffff);
            short[i] = if chars(names[i]) <= max {
                names[i].to_string()
            } else {
                format!("{}{tag}", shorten_to(names[i], max - chars(&tag)))
            };
        }
    }
    // Still colliding (a hash collision): the full names.
    let mut count: HashMap<&str, usize> = HashMap::new();
    for s in &short {
        *count.entry(s.as_str()).or_default() += 1;
    }
    let clash: Vec<bool> = short.iter().map(|s| count[s.as_str()] > 1).collect();
    short
        .into_iter()
        .zip(names)
        .zip(clash)
        .map(|((s, n), c)| if c { n.to_string() } else { s })
        .collect()
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// FNV-1a, 64 bits: a stable hash (the same tag in every run and build,
/// unlike std's randomly seeded one).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The last `max` characters of `s` behind a `…`: the tail of a C++
/// name (the kernel, its lambdas) tells functions apart more often than
/// its head.
fn cut_head(s: &str, max: usize) -> String {
    let cs: Vec<char> = s.chars().collect();
    if cs.len() <= max {
        return s.to_string();
    }
    let tail = max.saturating_sub(1);
    let mut out = String::from("…");
    out.extend(&cs[cs.len() - tail..]);
    out
}

/// The last `::` component of a simplified name, with its clone suffix
/// (`callback_fn<VectorizedLoop2d<div_true_kernel::λ2>>`).
fn last_component(name: &str) -> String {
    let scan = Scan { s: name.as_bytes() };
    match scan.split(b"::") {
        Some(parts) if parts.len() > 1 => {
            let (a, _) = parts[parts.len() - 1];
            name[a..].to_string()
        }
        _ => name.to_string(),
    }
}

/// Bracket depth scanning over a demangled name. `operator<`, `operator()`
/// and the like are skipped as one token so that their brackets do not
/// count.
struct Scan<'a> {
    s: &'a [u8],
}

impl<'a> Scan<'a> {
    /// The bytes from `from` on, with their positions; an `operator`
    /// token is stepped over whole, so that its brackets do not count.
    /// (The one walk that `split`, `close` and `simplify_component` share.)
    fn bytes_from(&self, from: usize) -> impl Iterator<Item = (usize, u8)> + 'a {
        let s = self.s;
        let mut i = from;
        std::iter::from_fn(move || {
            while i < s.len() {
                if let Some(skip) = operator_token(s, i) {
                    i += skip;
                    continue;
                }
                i += 1;
                return Some((i - 1, s[i - 1]));
            }
            None
        })
    }

    /// Byte ranges of `s` split at `sep` where no bracket is open; `None`
    /// when the brackets do not balance.
    fn split(&self, sep: &[u8]) -> Option<Vec<(usize, usize)>> {
        let mut parts = Vec::new();
        let mut depth: i32 = 0;
        let mut start = 0;
        for (i, b) in self.bytes_from(0) {
            if i < start {
                continue; // inside the separator just taken
            }
            match depth_change(b) {
                0 if depth == 0 && self.s[i..].starts_with(sep) => {
                    parts.push((start, i));
                    start = i + sep.len();
                }
                0 => {}
                change => {
                    depth += change;
                    if depth < 0 {
                        return None;
                    }
                }
            }
        }
        if depth != 0 {
            return None;
        }
        parts.push((start, self.s.len()));
        Some(parts)
    }

    /// The end (exclusive) of the bracket group opening at `open`.
    fn close(&self, open: usize) -> Option<usize> {
        let mut depth = 0;
        for (i, b) in self.bytes_from(open) {
            depth += depth_change(b);
            if depth == 0 {
                return Some(i + 1);
            }
        }
        None
    }
}

/// +1 for an opening bracket, -1 for a closing one, else 0.
fn depth_change(b: u8) -> i32 {
    match b {
        b'<' | b'(' | b'{' | b'[' => 1,
        b'>' | b')' | b'}' | b']' => -1,
        _ => 0,
    }
}

/// The length of an `operator` token starting at `i` (`operator<<=`,
/// `operator()`, `operator[]`, `operator new`), when one does.
fn operator_token(s: &[u8], i: usize) -> Option<usize> {
    const OP: &[u8] = b"operator";
    if !s[i..].starts_with(OP) || (i > 0 && is_ident(s[i - 1])) {
        return None;
    }
    let mut j = i + OP.len();
    if j < s.len() && is_ident(s[j]) {
        return None; // `operators`, an identifier
    }
    if s[j..].starts_with(b"()") || s[j..].starts_with(b"[]") {
        return Some(j + 2 - i);
    }
    while j < s.len() && b"<>=!+-*/%^&|~,".contains(&s[j]) {
        j += 1;
    }
    Some(j - i)
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Step (1): parameter lists, return types and qualifiers dropped,
/// template arguments collapsed except those naming an `at::native`
/// kernel. `None` when the name does not parse (brackets unbalanced).
fn simplify(name: &str) -> Option<String> {
    // A clone suffix (`[clone .isra.0]`) tells clones apart: kept.
    let (name, suffix) = match name.find(" [clone ") {
        Some(at) => (&name[..at], &name[at..]),
        None => (name, ""),
    };
    // A lambda's call operator inside a qualified name
    // (`f()::{lambda()#1}::operator()() const::{lambda()#2}`): its `const`
    // would read as a space between a return type and a name.
    let name = name.trim().replace(") const::", ")::");
    Some(simplify_name(&name, false)? + suffix)
}

/// One (possibly nested) name, simplified; `nested` for a template
/// argument, where `at::native::` and anonymous namespaces go too.
fn simplify_name(name: &str, nested: bool) -> Option<String> {
    let scan = Scan { s: name.as_bytes() };
    // Tokens at depth 0: [return type...] name [const] [&]...
    let mut tokens: Vec<&str> = scan
        .split(b" ")?
        .into_iter()
        .map(|(a, b)| &name[a..b])
        .filter(|t| !t.is_empty())
        .collect();
    while tokens.len() > 1
        && matches!(
            *tokens.last()?,
            "const" | "volatile" | "&" | "&&" | "noexcept"
        )
    {
        tokens.pop();
    }
    let last = tokens.len().checked_sub(1)?;
    // A conversion operator (`X::operator bool()`) spans two tokens.
    let first = if last > 0 && tokens[last - 1].ends_with("operator") {
        last - 1
    } else {
        last
    };
    let qualified = tokens[first..].join(" ");
    let scan = Scan {
        s: qualified.as_bytes(),
    };
    let mut out: Vec<String> = Vec::new();
    let mut after_lambda = false;
    for (a, b) in scan.split(b"::")? {
        let component = &qualified[a..b];
        if after_lambda && component.starts_with("operator()") {
            // A lambda's call operator: the lambda already names it.
            continue;
        }
        let simple = simplify_component(component)?;
        after_lambda = simple.starts_with('λ');
        out.push(simple);
    }
    if nested {
        if out.len() > 2 && out[0] == "at" && out[1] == "native" {
            out.drain(..2);
        }
        out.retain(|c| c != "(anon)");
    }
    Some(out.join("::"))
}

/// One `::` component: `{lambda(...)#N}` becomes `λN`, a parameter list
/// and what follows it go, template arguments collapse unless one names
/// an `at::native` kernel.
fn simplify_component(component: &str) -> Option<String> {
    let c = component.trim();
    if c == "(anonymous namespace)" {
        return Some("(anon)".into());
    }
    if let Some(rest) = c.strip_prefix("{lambda(") {
        if let Some(hash) = rest.rfind("#") {
            let n = rest[hash + 1..].trim_end_matches('}');
            return Some(format!("λ{n}"));
        }
    }
    let bytes = c.as_bytes();
    let scan = Scan { s: bytes };
    let mut base_end = None;
    let mut targs = None;
    // Where the walk goes on after a bracket group it stepped over.
    let mut resume = 0;
    for (i, b) in scan.bytes_from(0) {
        if i < resume {
            continue;
        }
        match b {
            b'<' if targs.is_none() => {
                let end = scan.close(i)?;
                base_end.get_or_insert(i);
                targs = Some((i + 1, end - 1));
                resume = end;
            }
            b'(' => {
                base_end.get_or_insert(i);
                break;
            }
            // `{unnamed type#1}`, `[abi:cxx11]`: kept as they are.
            b'{' | b'[' => resume = scan.close(i)?,
            _ => {}
        }
    }
    let base = &c[..base_end.unwrap_or(c.len())];
    let Some((a, b)) = targs else {
        return Some(base.to_string());
    };
    let args = &c[a..b];
    if !args.contains("at::native::") {
        return Some(format!("{base}<…>"));
    }
    let arg_scan = Scan { s: args.as_bytes() };
    let mut kept: Vec<String> = Vec::new();
    for (x, y) in arg_scan.split(b",")? {
        let arg = args[x..y].trim();
        let simple = if arg.contains("at::native::") {
            simplify_name(arg, true)?
        } else {
            "…".to_string()
        };
        // A vectorized loop's scalar and vector lambdas read alike once
        // their parameters are gone: one is enough.
        if kept.last() != Some(&simple) {
            kept.push(simple);
        }
    }
    Some(format!("{base}<{}>", kept.join(",")))
}

/// Step (2): the namespaces between the first component and the last one
/// elided (`c10::function_ref<…>::callback_fn<…>` →
/// `c10::…::callback_fn<…>`).
fn elide_namespaces(name: &str) -> String {
    let scan = Scan { s: name.as_bytes() };
    match scan.split(b"::") {
        Some(parts) if parts.len() > 2 => {
            let (a0, b0) = parts[0];
            let (al, bl) = parts[parts.len() - 1];
            format!("{}::…::{}", &name[a0..b0], &name[al..bl])
        }
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests;
