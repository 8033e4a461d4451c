//! The bounds a file's section and note tables are checked against before any is read whole: sections that are read whole must lie in data the file really holds (not in holes).
use super::*;

/// Section types whose contents are read whole (by the `object` parse or
/// by this crate) and so must be bounded by the data really in the file.
pub(super) const READ_WHOLE: [u32; 7] = [
    elf::SHT_SYMTAB.0,
    elf::SHT_DYNSYM.0,
    elf::SHT_STRTAB.0,
    elf::SHT_SYMTAB_SHNDX.0,
    elf::SHT_RELA.0,
    elf::SHT_REL.0,
    // The build ID, looked for in every note.
    elf::SHT_NOTE.0,
];

/// Sections read whole that are found by name (the unwind tables, the
/// debug link).
pub(super) const READ_WHOLE_NAMED: [&[u8]; 3] = [b".eh_frame", b".eh_frame_hdr", b".gnu_debuglink"];

/// Holes tolerated in one table before it is refused (a linker may leave
/// page padding unwritten; a real table has none).
pub(super) const MAX_TABLE_HOLES: u64 = 1 << 20;

/// How many bytes of `file`'s `[start, end)` hold data, from the
/// filesystem's record of holes (`SEEK_DATA`/`SEEK_HOLE`); all of them
/// where it keeps none. At most `MAX_EXTENTS` extents are walked, and the
/// rest is counted as holes: a file cut into that many pieces of data is
/// crafted (filesystems report a written file's data as one extent), and
/// counting the rest as data would let a few MiB on disk claim GiBs.
pub(super) fn data_bytes(file: &File, start: u64, end: u64) -> u64 {
    const MAX_EXTENTS: usize = 1 << 16;
    let fd = std::os::fd::AsRawFd::as_raw_fd(file);
    let seek = |at: u64, whence: libc::c_int| -> Option<u64> {
        let at = libc::off_t::try_from(at).ok()?;
        // SAFETY: lseek on a valid descriptor; it changes only the file
        // offset, which nothing here reads (reads use pread).
        let r = unsafe { libc::lseek(fd, at, whence) };
        u64::try_from(r).ok()
    };
    let mut at = start;
    let mut data = 0;
    for _ in 0..MAX_EXTENTS {
        if at >= end {
            return data;
        }
        // No data from here (ENXIO) or no hole support: done.
        let Some(from) = seek(at, libc::SEEK_DATA) else {
            return data;
        };
        if from >= end {
            return data;
        }
        let to = seek(from, libc::SEEK_HOLE).unwrap_or(end).min(end);
        data += to.saturating_sub(from);
        at = to.max(from + 1);
    }
    data
}

/// Checks, before the file is parsed, that every table read whole lies
/// inside the file (`len` bytes) and is made of data the file really holds:
/// a sparse file of 20 KiB on disk whose headers claim 10^8 symbols would
/// otherwise have the parse allocate and zero gigabytes. Only the ELF
/// header and the section headers are read (the latter bounded the same
/// way).
pub(super) fn check_tables(file: &File, len: u64) -> Result<(), String> {
    let read = |at: u64, n: usize| -> Result<Vec<u8>, String> {
        let mut buf = vec![0; n];
        file.read_exact_at(&mut buf, at)
            .map_err(|e| format!("unreadable ELF headers: {e}"))?;
        Ok(buf)
    };
    let header = read(0, 64)?;
    // Other files (not ELF, 32-bit, big-endian) are refused by the parse.
    if header[..4] != *b"\x7fELF"
        || header[4] != elf::ELFCLASS64.0
        || header[5] != elf::ELFDATA2LSB.0
    {
        return Ok(());
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u32_at =
        |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
    let u64_at =
        |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
    let shoff = u64_at(&header, 0x28);
    let shentsize = u64::from(u16_at(&header, 0x3a));
    let mut shnum = u64::from(u16_at(&header, 0x3c));
    let shstrndx = u64::from(u16_at(&header, 0x3e));
    check_note_segments(file, len, &header)?;
    if shoff == 0 {
        return Ok(());
    }
    if shentsize != 64 {
        return Err(format!("section header size {shentsize}, not 64"));
    }
    if shnum == 0 {
        // Extended numbering: the count is section 0's sh_size.
        shnum = u64_at(&read(shoff, 64)?, 0x20);
    }
    let table_end = shnum
        .checked_mul(64)
        .and_then(|n| n.checked_add(shoff))
        .filter(|&end| end <= len)
        .ok_or_else(|| {
            format!("{shnum} section headers at offset {shoff} would lie past the end of the file ({len} bytes)")
        })?;
    check_data(file, "the section headers", shoff, table_end)?;
    let headers = read(
        shoff,
        usize::try_from(table_end - shoff).map_err(|e| e.to_string())?,
    )?;
    let section = |i: u64| {
        let at = usize::try_from(i * 64).unwrap_or(usize::MAX);
        headers.get(at..at.saturating_add(64))
    };
    // Section names, where the name table is sound (used only to find the
    // unwind tables).
    let names = section(shstrndx).and_then(|h| {
        let (off, size) = (u64_at(h, 0x18), u64_at(h, 0x20));
        let end = off.checked_add(size).filter(|&e| e <= len)?;
        (size <= 1 << 20 && data_bytes(file, off, end) == size)
            .then(|| read(off, usize::try_from(size).ok()?).ok())
            .flatten()
    });
    for i in 0..shnum {
        let Some(h) = section(i) else { break };
        let (kind, off, size) = (u32_at(h, 0x04), u64_at(h, 0x18), u64_at(h, 0x20));
        let name = names.as_ref().and_then(|n| {
            let rest = n.get(usize::try_from(u32_at(h, 0)).ok()?..)?;
            Some(&rest[..rest.iter().position(|&b| b == 0)?])
        });
        let whole =
            READ_WHOLE.contains(&kind) || name.is_some_and(|n| READ_WHOLE_NAMED.contains(&n));
        if !whole || size == 0 {
            continue;
        }
        let what = match name {
            Some(n) => format!("section {}", String::from_utf8_lossy(n)),
            None => format!("section {i}"),
        };
        let end = off
            .checked_add(size)
            .filter(|&e| e <= len)
            .ok_or_else(|| {
                format!("{what} claims {size} bytes at offset {off}, past the end of the file ({len} bytes)")
            })?;
        if kind == elf::SHT_SYMTAB.0 || kind == elf::SHT_DYNSYM.0 {
            let entsize = u64_at(h, 0x38);
            if entsize != 24 || size % 24 != 0 {
                return Err(format!(
                    "{what}: {size} bytes of {entsize}-byte symbols (64-bit symbols are 24 bytes)"
                ));
            }
        }
        check_data(file, &what, off, end)?;
    }
    Ok(())
}

/// [`check_tables`] for the note segments (where a file without section
/// headers keeps its build ID, read whole), from the ELF header `header`.
pub(super) fn check_note_segments(file: &File, len: u64, header: &[u8]) -> Result<(), String> {
    let u64_at = |b: &[u8], at: usize| {
        b.get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let (phoff, phentsize, phnum) = (
        u64_at(header, 0x20),
        u64::from(u16_at(header, 0x36)),
        u64::from(u16_at(header, 0x38)),
    );
    if phoff == 0 || phnum == 0 {
        return Ok(());
    }
    if phentsize != 56 {
        return Err(format!(
            "program header size {phentsize}, not 64-bit ELF's 56"
        ));
    }
    // At most 65535 headers of 56 bytes: 3.5 MiB, and inside the file.
    let end = phoff
        .checked_add(phnum * 56)
        .filter(|&e| e <= len)
        .ok_or_else(|| format!("{phnum} program headers at offset {phoff} would lie past the end of the file ({len} bytes)"))?;
    check_data(file, "the program headers", phoff, end)?;
    let mut headers = vec![0; usize::try_from(end - phoff).map_err(|e| e.to_string())?];
    file.read_exact_at(&mut headers, phoff)
        .map_err(|e| format!("unreadable program headers: {e}"))?;
    for h in headers.chunks_exact(56) {
        if u32::from_le_bytes([h[0], h[1], h[2], h[3]]) != elf::PT_NOTE.0 {
            continue;
        }
        let (off, size) = (u64_at(h, 8), u64_at(h, 32));
        let end = off.checked_add(size).filter(|&e| e <= len).ok_or_else(|| {
            format!("a note segment claims {size} bytes at offset {off}, past the end of the file ({len} bytes)")
        })?;
        check_data(file, "a note segment", off, end)?;
    }
    Ok(())
}

/// An error when `[start, end)` of `file` (a table read whole) is more
/// hole than data.
pub(super) fn check_data(file: &File, what: &str, start: u64, end: u64) -> Result<(), String> {
    let size = end - start;
    if size <= MAX_TABLE_HOLES {
        return Ok(());
    }
    let data = data_bytes(file, start, end);
    if size - data > MAX_TABLE_HOLES {
        return Err(format!(
            "{what} claims {size} bytes but the file holds {data} bytes of data there \
             (a sparse file): not read"
        ));
    }
    Ok(())
}
