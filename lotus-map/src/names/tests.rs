use std::collections::{HashMap, HashSet};

use super::*;

/// Real torch function names (libtorch_cpu, libc10, libtorch_python) from
/// mappings of fixtures/torch_ops/ under perf, with 1 and several threads.
const TORCH_NAMES: &str = include_str!("../../../fixtures/names/torch_functions.txt");

fn torch_names() -> Vec<&'static str> {
    TORCH_NAMES.lines().filter(|l| !l.is_empty()).collect()
}

#[test]
fn real_torch_names_stay_distinct_and_fit_at_every_width() {
    let names = torch_names();
    assert!(names.len() > 100, "the fixture holds {} names", names.len());
    assert!(names.iter().any(|n| n.chars().count() > 500));
    for width in [MIN_NAME_WIDTH, 40, 60, 90, 120] {
        let short = shorten_all(&names, width);
        let mut seen: HashMap<&str, &str> = HashMap::new();
        for (full, s) in names.iter().zip(&short) {
            assert!(
                s.chars().count() <= width,
                "width {width}: {s:?} ({} chars) from {full}",
                s.chars().count()
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
fn the_shortener_alone_keeps_the_kernels_apart_at_a_table_width() {
    // Without the hash tags: the structure kept (kernel, capability,
    // lambdas) already tells the torch kernel loops apart at 120 columns
    // (overloads, told apart only by their parameters, get tags).
    let names = torch_names();
    let mut seen: HashMap<String, &str> = HashMap::new();
    for full in names.iter().filter(|n| n.contains("callback_fn<")) {
        let s = shorten(full, 120);
        if let Some(other) = seen.insert(s.clone(), full) {
            panic!("{s:?} stands for both\n  {other}\n  {full}");
        }
    }
}

#[test]
fn a_kernel_callback_keeps_the_kernels_own_name() {
    let copy = TORCH_NAMES
        .lines()
        .find(|l| l.starts_with("void c10::function_ref") && l.contains("direct_copy_kernel"))
        .expect("a direct_copy_kernel callback in the fixture");
    let short = shorten(copy, 90);
    assert!(short.contains("direct_copy_kernel::λ3::λ"), "{short}");
    assert!(short.contains("callback_fn<"), "{short}");
    assert!(!short.starts_with("void "), "return type kept: {short}");
    assert!(!short.contains("(long, char**"), "parameters kept: {short}");
    let roomy = shorten(copy, 120);
    assert!(
        roomy.starts_with("c10::function_ref<…>::callback_fn<"),
        "{roomy}"
    );
    // Kernels in different CPU capabilities or lambdas differ.
    let kernels: HashSet<String> = TORCH_NAMES
        .lines()
        .filter(|l| l.contains("callback_fn<") && l.contains("at::native::"))
        .map(|l| shorten(l, 120))
        .collect();
    assert!(kernels.iter().any(|k| k.contains("div_true_kernel")));
    assert!(kernels
        .iter()
        .any(|k| k.contains("add_kernel") || k.contains("direct_copy_kernel")));
}

#[test]
fn names_that_fit_are_kept_and_simplification_steps_apply_in_order() {
    assert_eq!(shorten("ImagingFlipLeftRight", 40), "ImagingFlipLeftRight");
    let long = "at::native::copy_impl(at::Tensor&, at::Tensor const&, bool) [clone .isra.0]";
    assert_eq!(shorten(long, 40), "at::native::copy_impl [clone .isra.0]");
    let templ = "std::vector<std::pair<long, std::basic_string<char, std::char_traits<char>, std::allocator<char> > >, std::allocator<std::pair<long, long> > >::_M_realloc_insert(int) const";
    assert_eq!(shorten(templ, 40), "std::vector<…>::_M_realloc_insert");
    let ops = "c10::impl::detail::WrapFunctionIntoRuntimeFunctor_<int>::operator()(int) const";
    assert_eq!(
        shorten(ops, 30),
        "c10::…::operator()",
        "operator() is one token, not a parameter list"
    );
    assert_eq!(
        shorten(
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
    ] {
        let s = shorten(name, 30);
        assert!(s.chars().count() <= 30, "{s}");
    }
    let clash = ["a".repeat(50) + "x", "a".repeat(50) + "y"];
    let refs: Vec<&str> = clash.iter().map(String::as_str).collect();
    let short = shorten_all(&refs, 30);
    assert_ne!(short[0], short[1]);
}

#[test]
fn a_stub_or_version_suffix_is_kept_whole_after_the_shortened_name() {
    let stub = "at::TensorIteratorConfig::add_owned_const_input(at::TensorBase const&)@plt";
    assert_eq!(shorten(stub, 40), "at::…::add_owned_const_input@plt");
    assert_eq!(
        shorten(stub, 60),
        "at::TensorIteratorConfig::add_owned_const_input@plt"
    );
    let versioned = "std::vector<std::pair<long, long>, std::allocator<std::pair<long, long> > >::_M_realloc_insert(int) const@@GLIBCXX_3.4";
    assert_eq!(
        shorten(versioned, 50),
        "std::vector<…>::_M_realloc_insert@@GLIBCXX_3.4"
    );
    // A stub and its function stay apart however narrow the table.
    let function = "at::TensorIteratorConfig::add_owned_const_input(at::TensorBase const&)";
    for width in [24, 30, 40, 60] {
        assert_ne!(shorten(stub, width), shorten(function, width), "{width}");
        assert!(shorten(stub, width).chars().count() <= width, "{width}");
    }
    // A suffix longer than half the width is not kept whole: the name is
    // still cut to fit.
    let odd = format!("f@{}", "v".repeat(100));
    assert!(shorten(&odd, 30).chars().count() <= 30);
}
