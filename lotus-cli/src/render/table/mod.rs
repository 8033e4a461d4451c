//! Terminal tables that fit the width: their layout.
//!
//! The width every table fits ([`width`]: `COLUMNS`, else the terminal's,
//! else 100) and the names in its cells ([`short_names`], [`module_name`],
//! cut with [`cut_right`]) are `lotus_core`'s one rule (its `names`
//! module), re-exported here for the renderers; this module holds only the
//! layout. A [`Grid`] gives its names column what the other columns leave;
//! where even the numbers do not fit, the columns are folded: the table is
//! printed in parts, each repeating its first (key) column, the names in a
//! part of their own. `--wide` leaves names whole (the lines may then be
//! wider). [`wrap`], [`wrap_plain`] and [`wrap_lines`] (`lotus_core`'s,
//! with the width rule) fit text around the tables to the same width.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, ContentArrangement, Table};

pub use lotus_core::{
    cut_right, display_width, module_name, short_names, table_width as width, wrap, wrap_lines,
    wrap_plain,
};

/// Names columns are at least this wide where the table can give them
/// room (else they go to a part of the table of their own).
pub const NAME_MIN: usize = 24;

/// A Markdown cell's text: on one line, its `|` escaped.
pub fn md_escape(s: &str) -> String {
    lotus_map::output::one_line(s).replace('|', "\\|")
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
        let key_max = self.key_max(&rows, width);
        self.fit_key(&mut rows, width, key_max);
        let widths: Vec<usize> = (0..n).map(|c| self.col_width(&rows, c)).collect();
        let Some(names) = self.names.as_ref().filter(|names| names.column > 0) else {
            return self.fold(&rows, &widths, &all, width);
        };
        self.fit_names(rows, &widths, width, names)
    }

    /// The widest a cell of column `c` of `rows` is (its header included).
    fn col_width(&self, rows: &[Vec<String>], c: usize) -> usize {
        rows.iter()
            .map(|r| display_width(&r[c]))
            .chain([display_width(&self.columns[c].header)])
            .max()
            .unwrap_or(0)
    }

    /// The key column gives up what the table lacks to fit the width
    /// (its cells wrapped at spaces), down to a sixth of the width;
    /// where that is not enough the table is folded.
    fn key_max(&self, rows: &[Vec<String>], width: usize) -> usize {
        let n = self.columns.len();
        // The key column gives up what the table lacks to fit the width
        // (its cells wrapped at spaces), down to a sixth of the width;
        // where that is not enough the table is folded.
        let natural: Vec<usize> = (0..n).map(|c| self.col_width(rows, c)).collect();
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
    }

    /// The key column fitted: the names, where they are the key, get what
    /// the other columns leave; any other key is wrapped at `key_max`.
    fn fit_key(&self, rows: &mut [Vec<String>], width: usize, key_max: usize) {
        let n = self.columns.len();
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
                fill(rows, 0, (names.cells)(room));
            }
            _ => {
                for r in rows.iter_mut() {
                    r[0] = r[0]
                        .lines()
                        .map(|l| wrap_plain(l, key_max))
                        .collect::<Vec<_>>()
                        .join("\n");
                }
            }
        }
    }

    /// The names (not the key) given what the other columns leave; where
    /// that is too little, the table folded: the other columns, then the
    /// key with the names.
    fn fit_names(
        &self,
        mut rows: Vec<Vec<String>>,
        widths: &[usize],
        width: usize,
        names: &Names<'a>,
    ) -> String {
        let n = self.columns.len();
        let all: Vec<usize> = (0..n).collect();
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
        let mut out = self.fold(&rows, widths, &fixed, width);
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
        let key_width = self.col_width(&rows, 0);
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
mod tests;
