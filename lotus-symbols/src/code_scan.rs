//! Function starts in code that neither symbols nor unwind tables cover.

/// Starts functions inside an uncovered gap: its start, and each 16-byte
/// aligned `push %rbp; mov %rsp,%rbp` (the frame-pointer prologue of code
/// built without unwind tables) that follows a `ret` and nothing but
/// padding. x86-64 only; elsewhere a gap is one function.
pub fn gap_function_starts(gap_start: u64, code: &[u8], x86_64: bool, out: &mut Vec<u64>) {
    const PROLOGUE: [u8; 4] = [0x55, 0x48, 0x89, 0xe5];
    // Bytes of the multi-byte nops and int3 that pad between functions.
    const PADDING: [u8; 11] = [
        0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x40, 0x44, 0x80, 0xcc,
    ];
    out.push(gap_start);
    if !x86_64 {
        return;
    }
    // The gap's start is one already: the first aligned address after it.
    let mut address = (gap_start + 1).next_multiple_of(16);
    while let Some(at) = address
        .checked_sub(gap_start)
        .and_then(|a| usize::try_from(a).ok())
    {
        if at + PROLOGUE.len() > code.len() {
            break;
        }
        if code[at..at + PROLOGUE.len()] == PROLOGUE {
            let before = &code[at.saturating_sub(32)..at];
            let last = before.iter().rposition(|b| !PADDING.contains(b));
            if last.is_some_and(|i| before[i] == 0xc3) {
                out.push(address);
            }
        }
        address += 16;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_split_at_frame_pointer_prologues_after_a_return() {
        let mut code = vec![0xcc; 0x60];
        code[0x0f] = 0xc3; // ret, then padding, then a prologue at 0x20
        code[0x10..0x20].fill(0x90);
        code[0x20..0x24].copy_from_slice(&[0x55, 0x48, 0x89, 0xe5]);
        code[0x3a] = 0x01; // not padding: no start at 0x40
        code[0x40..0x44].copy_from_slice(&[0x55, 0x48, 0x89, 0xe5]);
        let mut starts = Vec::new();
        gap_function_starts(0x1000, &code, true, &mut starts);
        assert_eq!(starts, vec![0x1000, 0x1020]);
        starts.clear();
        gap_function_starts(0x1000, &code, false, &mut starts);
        assert_eq!(starts, vec![0x1000]);
    }
}
