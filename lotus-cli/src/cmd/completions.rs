//! `lotus completions SHELL`: shell completion scripts (clap_complete),
//! generated from the same clap definitions as `--help`, so they never
//! drift from it.

use std::process::ExitCode;

use anyhow::Result;
use clap::CommandFactory;
use clap_complete::Shell;

use crate::usage::write_stdout;

/// `lotus completions` arguments.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Install, for example:\n  lotus completions bash > ~/.local/share/bash-completion/completions/lotus\n  lotus completions zsh > ~/.zfunc/_lotus      (with fpath+=(~/.zfunc) before compinit)\n  lotus completions fish > ~/.config/fish/completions/lotus.fish"
)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    shell: Shell,
}

/// Prints the completion script for `args.shell`.
pub fn run<C: CommandFactory>(args: CompletionsArgs) -> Result<ExitCode> {
    let mut cmd = C::command();
    let mut text = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "lotus", &mut text);
    write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}
