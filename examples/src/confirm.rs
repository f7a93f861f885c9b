//! Asking before destroying data. Every tool operation that destroys what a
//! namespace holds goes on only with `--yes`, or after `yes` typed on a
//! terminal. Without a terminal and without `--yes` it refuses: a script
//! never destroys data because nobody was there to answer.

use std::io::{BufRead, IsTerminal, Read, Write};

/// The longest answer read: enough for `yes` and some blanks.
const ANSWER_BYTES_MAX: u64 = 64;

/// Goes on (`Ok`) if `yes` (the user passed `--yes`), or if the user types
/// `yes` on `input`, asked on `prompt` with `"{tool}: {what}. Type 'yes' to
/// go on: "`. Refuses without asking when `input_is_terminal` is false.
/// `what` says what is destroyed, e.g. "--format destroys everything on
/// namespace 1 of 0000:01:00.0".
pub fn confirm(
    tool: &str,
    what: &str,
    yes: bool,
    input: &mut dyn BufRead,
    input_is_terminal: bool,
    prompt: &mut dyn Write,
) -> Result<(), String> {
    if yes {
        return Ok(());
    }
    if !input_is_terminal {
        return Err(format!("{what}; stdin is not a terminal to ask on: pass --yes to go on"));
    }
    write!(prompt, "{tool}: {what}. Type 'yes' to go on: ").and_then(|()| prompt.flush()).map_err(|e| e.to_string())?;
    let mut answer = String::new();
    input.take(ANSWER_BYTES_MAX).read_line(&mut answer).map_err(|e| format!("reading the answer: {e}"))?;
    if answer.trim() == "yes" {
        Ok(())
    } else {
        Err("not confirmed: nothing was changed".into())
    }
}

/// [`confirm`] on the process's stdin, asking on stderr.
pub fn confirm_on_stdin(tool: &str, what: &str, yes: bool) -> Result<(), String> {
    let stdin = std::io::stdin();
    let is_terminal = stdin.is_terminal();
    confirm(tool, what, yes, &mut stdin.lock(), is_terminal, &mut std::io::stderr())
}

/// A confirmation in two steps, so that it can name the devices by what
/// they are without opening any when nobody can answer:
/// [`Confirmation::before_opening`] refuses at once without `--yes` and
/// without a terminal; [`Confirmation::ask`], once the devices are open
/// (and only read), asks with them named ([`crate::device::named`]).
#[derive(Debug)]
#[must_use = "ask once the devices are open"]
pub struct Confirmation {
    ask: bool,
}

impl Confirmation {
    /// Before any device is opened: `Err` naming `what` (as the arguments
    /// give it) when the user can be neither asked nor has said `--yes`.
    pub fn before_opening(what: &str, yes: bool) -> Result<Confirmation, String> {
        if yes {
            return Ok(Confirmation { ask: false });
        }
        if !std::io::stdin().is_terminal() {
            return Err(format!("{what}; stdin is not a terminal to ask on: pass --yes to go on"));
        }
        Ok(Confirmation { ask: true })
    }

    /// Asks, unless `--yes` was given: `what` names the devices opened.
    pub fn ask(self, tool: &str, what: &str) -> Result<(), String> {
        if self.ask {
            confirm_on_stdin(tool, what, false)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(yes: bool, answer: &str, is_terminal: bool) -> (Result<(), String>, String) {
        let mut prompt = Vec::new();
        let result =
            confirm("tool", "this destroys namespace 1", yes, &mut answer.as_bytes(), is_terminal, &mut prompt);
        (result, String::from_utf8(prompt).expect("utf-8"))
    }

    #[test]
    fn yes_goes_on_without_asking() {
        for is_terminal in [false, true] {
            let (result, prompt) = ask(true, "", is_terminal);
            assert_eq!(result, Ok(()));
            assert!(prompt.is_empty(), "asked: {prompt}");
        }
    }

    #[test]
    fn no_terminal_refuses_without_asking_or_reading() {
        let (result, prompt) = ask(false, "yes\n", false);
        let message = result.unwrap_err();
        assert!(message.contains("--yes"), "{message}");
        assert!(message.contains("this destroys namespace 1"), "{message}");
        assert!(prompt.is_empty(), "asked: {prompt}");
    }

    #[test]
    fn a_terminal_is_asked_and_only_yes_goes_on() {
        let (result, prompt) = ask(false, "yes\n", true);
        assert_eq!(result, Ok(()));
        assert_eq!(prompt, "tool: this destroys namespace 1. Type 'yes' to go on: ");
        assert_eq!(ask(false, "  yes  \n", true).0, Ok(()));
        for answer in ["", "\n", "y\n", "YES\n", "no\n", "yes please\n", "yess\n"] {
            let (result, _) = ask(false, answer, true);
            assert!(result.unwrap_err().contains("not confirmed"), "{answer:?}");
        }
    }
}
