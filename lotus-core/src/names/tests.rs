//! Unit tests of the name shortener and the width rule.

use std::collections::{HashMap, HashSet};

use super::*;

/// Real torch function names (libtorch_cpu, libc10, libtorch_python) from
/// mappings of fixtures/torch_ops/ under perf, with 1 and several threads.
const TORCH_NAMES: &str = include_str!("../../../fixtures/names/torch_functions.txt");

fn torch_names() -> Vec<&'static str> {
    TORCH_NAMES.lines().filter(|l| !l.is_empty()).collect()
}

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
    // `--wide`: whole.
    assert_eq!(short_names(&[kernel], usize::MAX), [kernel]);
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
fn cuts_count_terminal_columns() {
    assert_eq!(display_width("ab\n日本語"), 6);
    assert_eq!(cut_right("日本語の名前", 7), "日本語…");
    assert_eq!(cut_right("abc", 3), "abc");
    assert_eq!(cut_middle("abcdefghijklmnop", 10), "abcdef…nop");
}

#[test]
fn real_torch_names_stay_distinct_and_fit_at_every_width() {
    let names = torch_names();
    assert!(names.len() > 100, "the fixture holds {} names", names.len());
    assert!(names.iter().any(|n| n.chars().count() > 500));
    for width in [MIN_NAME, 24, 40, 60, 90, 120] {
        let short = short_names(&names, width);
        let mut seen: HashMap<&str, &str> = HashMap::new();
        for (full, s) in names.iter().zip(&short) {
            assert!(
                display_width(s) <= width,
                "width {width}: {s:?} ({} columns) from {full}",
                display_width(s)
            );
            if let Some(other) = seen.insert(s, full) {
                assert_eq!(
                    other, *full,
                    "width {width}: two functions read {s:?}:\n  {other}\n  {full}"
                );
            }
        }
    }
}

#[test]
fn a_kernel_callback_reads_as_the_kernels_own_name() {
    let copy = TORCH_NAMES
        .lines()
        .find(|l| l.starts_with("void c10::function_ref") && l.contains("direct_copy_kernel"))
        .expect("a direct_copy_kernel callback in the fixture");
    let short = short_name(copy, 90);
    assert!(short.contains("direct_copy_kernel::λ3::λ"), "{short}");
    assert!(short.starts_with("callback_fn<"), "{short}");
    assert!(!short.contains("(long, char**"), "parameters kept: {short}");
    // Kernels in different CPU capabilities or lambdas differ.
    let callbacks: Vec<&str> = torch_names()
        .into_iter()
        .filter(|l| l.contains("callback_fn<") && l.contains("at::native::"))
        .collect();
    let kernels: HashSet<String> = short_names(&callbacks, 120).into_iter().collect();
    assert!(kernels.iter().any(|k| k.contains("div_true_kernel")));
    assert!(kernels
        .iter()
        .any(|k| k.contains("add_kernel") || k.contains("direct_copy_kernel")));
}

#[test]
fn return_types_parameters_templates_and_clone_suffixes_go() {
    assert_eq!(
        short_name("ImagingFlipLeftRight", 40),
        "ImagingFlipLeftRight"
    );
    let clone = "at::native::copy_impl(at::Tensor&, at::Tensor const&, bool) [clone .isra.0]";
    assert_eq!(short_name(clone, 40), "copy_impl");
    let templ = "std::vector<std::pair<long, std::basic_string<char, std::char_traits<char>, std::allocator<char> > >, std::allocator<std::pair<long, long> > >::_M_realloc_insert(int) const";
    assert_eq!(short_name(templ, 40), "_M_realloc_insert");
    let ops = "c10::impl::detail::WrapFunctionIntoRuntimeFunctor_<int>::operator()(int) const";
    assert_eq!(
        short_name(ops, 30),
        "operator()",
        "operator() is one token, not a parameter list"
    );
    assert_eq!(
        short_name(
            "bool operator<<(std::ostream&, a::b::c::d::e::f::g::h::i::j::k const&)",
            24
        ),
        "operator<<"
    );
}

#[test]
fn malformed_names_are_cut_not_panicked_on() {
    for name in [
        "a<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<",
        "x)))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))",
        "{lambda(ééééééééééééééééééééééééééééééééééééééééééééééééééé#",
        "operator",
        "::::::::::::::::::::::::::::::::::::::::::::::::::::::::::::::",
        "a::b@",
        "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@",
    ] {
        let s = short_name(name, 30);
        assert!(display_width(&s) <= 30, "{s}");
    }
    let clash = ["a".repeat(50) + "x", "a".repeat(50) + "y"];
    let refs: Vec<&str> = clash.iter().map(String::as_str).collect();
    let short = short_names(&refs, 30);
    assert_ne!(short[0], short[1]);
}

#[test]
fn a_stub_or_version_suffix_is_kept_whole_after_the_shortened_name() {
    let stub = "at::TensorIteratorConfig::add_owned_const_input(at::TensorBase const&)@plt";
    assert_eq!(short_name(stub, 40), "add_owned_const_input@plt");
    let versioned = "std::vector<std::pair<long, long>, std::allocator<std::pair<long, long> > >::_M_realloc_insert(int) const@@GLIBCXX_3.4";
    assert_eq!(short_name(versioned, 50), "_M_realloc_insert@@GLIBCXX_3.4");
    // A stub and its function stay apart however narrow the table.
    let function = "at::TensorIteratorConfig::add_owned_const_input(at::TensorBase const&)";
    for width in [MIN_NAME, 24, 30, 40, 60] {
        let s = short_names(&[stub, function], width);
        assert_ne!(s[0], s[1], "{width}");
        assert!(
            s.iter().all(|s| display_width(s) <= width),
            "{width}: {s:?}"
        );
    }
    // A C name keeps its suffix as it is (the name is whole).
    assert_eq!(
        short_name("pthread_mutex_lock@@GLIBC_2.2.5", 40),
        "pthread_mutex_lock@@GLIBC_2.2.5"
    );
    assert_eq!(short_name("func@0x59620", 48), "func@0x59620");
    // A suffix longer than half the width is not kept whole: the name is
    // still cut to fit.
    let odd = format!("a::f@{}", "v".repeat(100));
    assert!(display_width(&short_name(&odd, 30)) <= 30);
}

#[test]
fn the_width_is_columns_else_the_terminal_else_100_never_under_40() {
    // The tests' standard output is no terminal (cargo captures it):
    // COLUMNS, else the default.
    let old = std::env::var_os("COLUMNS");
    std::env::set_var("COLUMNS", "132");
    assert_eq!(table_width(), 132);
    std::env::set_var("COLUMNS", "10");
    assert_eq!(table_width(), MIN_WIDTH);
    std::env::set_var("COLUMNS", "wide");
    let fallback = table_width();
    match old {
        Some(v) => std::env::set_var("COLUMNS", v),
        None => std::env::remove_var("COLUMNS"),
    }
    if lotus_sys::terminal_columns().is_none() {
        assert_eq!(fallback, DEFAULT_WIDTH);
    }
}

/// A row's name is not a function's: where the rules find no function
/// name in it (words and a parenthesis), it is shown as it is, never
/// blank (the report's rows outside ops had empty name cells).
#[test]
fn a_rows_name_with_words_and_parentheses_is_shown_not_blanked() {
    for row in [
        "start-up and imports (worker)",
        "outside any op (worker)",
        "training loop, outside the DataLoader (main)",
        "Spin/spin (after)",
    ] {
        let short = short_name(row, 48);
        assert!(!short.trim().is_empty(), "{row}: blank");
        assert_eq!(short, row, "{row} fits in 48 columns");
    }
    assert!(!short_name("starting and stopping workers (main)", 12)
        .trim()
        .is_empty());
}
