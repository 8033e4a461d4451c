//! Unit tests of the tables' layout (the names' own tests are
//! lotus-core's, beside the shortener).

use super::*;

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
        r.extend(["5243", "5243.0 ±141.9", "82.6", "128", "10.793", "1234.5"].map(String::from));
        r.extend([String::new(), "libpython3.11.so.…".into(), "14%".into()]);
        r
    };
    let rows = vec![
        row("other threads, cause unknown (worker)"),
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
