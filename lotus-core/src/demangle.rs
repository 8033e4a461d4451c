//! Demangling of C++ (Itanium ABI) and Rust symbol names.
//!
//! Profilers report raw linkage names for code without debug info
//! (`_ZN3foo3barEv`); people read `foo::bar()`. Names that are already
//! readable pass through unchanged.

/// Returns the demangled form of `name`, or `name` itself when it is not a
/// mangled C++ or Rust symbol. A suffix after `@` is not part of the
/// mangling: a PLT stub's `@plt` (`perf` and `objdump` name stubs so) or
/// a symbol version (`@@GLIBC_2.2.5`, `@VERS_1`); the name before it is
/// demangled and the suffix kept, as `perf report` shows them.
///
/// ```
/// use lotus_core::demangle;
/// assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
/// assert_eq!(demangle("_ZN3foo3barEv@plt"), "foo::bar()@plt");
/// assert_eq!(demangle("_ZN4core3fmt5write17h0123456789abcdefE"), "core::fmt::write");
/// assert_eq!(demangle("ImagingFlipLeftRight"), "ImagingFlipLeftRight");
/// ```
pub fn demangle(name: &str) -> String {
    // Mangled names never hold `@` (Itanium and both Rust schemes use
    // identifier characters, `$` and `.` only).
    if let Some(at) = name.find('@').filter(|&at| at > 0) {
        let (base, suffix) = name.split_at(at);
        let plain = demangle_whole(base);
        if plain != base {
            return plain + suffix;
        }
        return name.to_string();
    }
    demangle_whole(name)
}

/// [`demangle`] of a name without an `@` suffix.
fn demangle_whole(name: &str) -> String {
    // Rust legacy (`_ZN...17h<hash>E`) and v0 (`_R...`) symbols: rustc-demangle
    // recognises them exactly and rejects everything else.
    if let Ok(sym) = rustc_demangle::try_demangle(name) {
        // `{:#}` drops the hash suffix, which only makes names unstable
        // between builds.
        return format!("{sym:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(text) = sym.demangle() {
                return text;
            }
        }
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn cpp_names_with_templates_and_arguments() {
        assert_eq!(
            demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)"
        );
    }

    #[test]
    fn rust_v0_names() {
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
    }

    #[test]
    fn stub_and_version_suffixes_are_kept_after_the_demangled_name() {
        assert_eq!(
            demangle("_ZN2at20TensorIteratorConfig21add_owned_const_inputERKNS_10TensorBaseE@plt"),
            "at::TensorIteratorConfig::add_owned_const_input(at::TensorBase const&)@plt"
        );
        assert_eq!(
            demangle("_ZNSt6vectorIiSaIiEE9push_backERKi@@GLIBCXX_3.4"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)@@GLIBCXX_3.4"
        );
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE@plt"),
            "core::fmt::write@plt"
        );
        for name in [
            "memcpy@plt",
            "pthread_mutex_lock@@GLIBC_2.2.5",
            "@plt",
            "_Zfoo@plt",
        ] {
            assert_eq!(demangle(name), name);
        }
    }

    #[test]
    fn plain_and_malformed_names_pass_through() {
        for name in ["main", "func@0x1e7f80", "_Z", "_Zfoo", "[Unknown]", ""] {
            assert_eq!(demangle(name), name);
        }
    }
}
