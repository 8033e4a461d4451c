//! The machine a measurement was made on, as a mapping records it in its
//! `environment` (for comparing ops across CPU models: `lotus compare`):
//! `cpu_model` (`/proc/cpuinfo`'s `model name`, or `Hardware` / `CPU part`
//! where there is none, as on some Arm machines), `cpus` (logical CPUs
//! listed there), `cpu_cores` (distinct physical id / core id pairs, where
//! listed) and `kernel` (`/proc/sys/kernel/osrelease`). What cannot be
//! read is left out, never guessed.

use std::collections::{BTreeMap, BTreeSet};

/// The facts of this machine (see the module documentation).
pub fn facts() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string("/proc/cpuinfo") {
        out.extend(cpuinfo_facts(&text));
    }
    if let Ok(k) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        let k = k.trim();
        if !k.is_empty() {
            out.insert("kernel".into(), k.to_string());
        }
    }
    out
}

/// `cpu_model`, `cpus` and `cpu_cores` from the text of `/proc/cpuinfo`.
pub fn cpuinfo_facts(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut model: Option<&str> = None;
    let mut fallback: Option<&str> = None;
    let mut cpus = 0u32;
    let mut cores = BTreeSet::new();
    let mut physical: Option<&str> = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "processor" => {
                cpus += 1;
                physical = None;
            }
            "model name" if model.is_none() && !value.is_empty() => model = Some(value),
            "Hardware" | "CPU part" if fallback.is_none() && !value.is_empty() => {
                fallback = Some(value)
            }
            "physical id" => physical = Some(value),
            "core id" => {
                cores.insert((physical.unwrap_or(""), value));
            }
            _ => {}
        }
    }
    if let Some(m) = model.or(fallback) {
        out.insert("cpu_model".into(), m.to_string());
    }
    if cpus > 0 {
        out.insert("cpus".into(), cpus.to_string());
    }
    if !cores.is_empty() {
        out.insert("cpu_cores".into(), cores.len().to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_model_cpus_and_cores() {
        let text = "processor\t: 0\nmodel name\t: Xeon X\nphysical id\t: 0\ncore id\t\t: 0\n\n\
                    processor\t: 1\nmodel name\t: Xeon X\nphysical id\t: 0\ncore id\t\t: 0\n\n\
                    processor\t: 2\nmodel name\t: Xeon X\nphysical id\t: 1\ncore id\t\t: 0\n";
        let f = cpuinfo_facts(text);
        assert_eq!(f["cpu_model"], "Xeon X");
        assert_eq!(f["cpus"], "3");
        assert_eq!(f["cpu_cores"], "2");
        let arm = cpuinfo_facts("processor\t: 0\nCPU part\t: 0xd0c\n");
        assert_eq!(arm["cpu_model"], "0xd0c");
        assert!(!arm.contains_key("cpu_cores"));
        assert!(cpuinfo_facts("").is_empty());
    }
}
