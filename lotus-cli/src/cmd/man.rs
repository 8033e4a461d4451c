//! `lotus man [--out DIR]`: man pages (clap_mangen), generated from the
//! same clap definitions as `--help`, so they never drift from it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Command, CommandFactory};

use crate::usage::{note, write_stdout};
use lotus_sys::write_file;

/// `lotus man` arguments.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Read it with `lotus man | man -l -`; `lotus man --out /usr/local/share/man/man1` installs every page."
)]
pub struct ManArgs {
    /// Write lotus.1 and one page per command (lotus-map.1, lotus-trace-view.1, ...) into DIR instead of printing lotus.1 (`-`: print it).
    #[arg(long, short, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Prints lotus(1), or writes every command's page into `--out DIR`, each
/// dated with lotus's `version`.
pub fn run<C: CommandFactory>(args: ManArgs, version: &'static str) -> Result<ExitCode> {
    let mut cmd = C::command();
    cmd.build();
    // `--out -` is standard output, as for every other command.
    match args.out.filter(|d| !crate::usage::is_stdout(d)) {
        None => write_stdout(&render(cmd)?)?,
        Some(dir) => {
            lotus_sys::create_dir_all(&dir, 0o777).context("man --out")?;
            let mut pages = Vec::new();
            collect_pages(cmd, version, &mut pages);
            for (name, page) in &pages {
                let path = dir.join(format!("{name}.1"));
                let text =
                    String::from_utf8(render(page.clone())?).context("a man page is not UTF-8")?;
                write_file(&path, text.as_bytes())?;
            }
            note!(
                "lotus: wrote {} man page(s) to {}",
                pages.len(),
                dir.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `cmd` and every subcommand below it, named as man pages are
/// (`lotus-trace-view`) and dated with lotus's `version`, help and the
/// hidden ones left out.
fn collect_pages(cmd: Command, version: &'static str, pages: &mut Vec<(String, Command)>) {
    let name = cmd
        .get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string();
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        let sub_name = format!("{name}-{}", sub.get_name());
        let sub = sub.clone().display_name(sub_name).version(version);
        collect_pages(sub, version, pages);
    }
    pages.insert(0, (name, cmd));
}

fn render(cmd: Command) -> Result<Vec<u8>> {
    let mut text = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut text)
        .context("cannot render the man page")?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap's own checks of the definitions (two flags with one short
    /// name, a conflict with an unknown argument...), which otherwise run
    /// only when the faulty command is parsed.
    #[test]
    fn definitions_pass_clap_checks() {
        crate::Cli::command().debug_assert();
    }
}
