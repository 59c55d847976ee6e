//! `--exec CMD`: CMD runs through `sh -c` with the fresh object (JSON) on its stdin, and
//! its stdout is the proposed object. Its stderr passes through to the user's.

use std::io::Write as _;
use std::process::{Command, Stdio};

use serde_json::Value;

/// What one run of the command proposed.
#[derive(Debug)]
pub enum Proposal {
    /// It printed this object.
    Object(Value),
    /// It exited non-zero (or was killed): write nothing. The text says how it ended.
    Abort(String),
    /// It printed something that is not one JSON object.
    Invalid(String),
}

/// Runs `command` with `fresh` on stdin, off the async threads.
pub async fn run(command: &str, fresh: String) -> Proposal {
    let command = command.to_string();
    match tokio::task::spawn_blocking(move || run_blocking(&command, fresh.into_bytes())).await {
        Ok(proposal) => proposal,
        Err(error) => Proposal::Abort(format!("the --exec command could not be run: {error}")),
    }
}

fn run_blocking(command: &str, input: Vec<u8>) -> Proposal {
    let mut child = match Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(child) => child,
        Err(error) => {
            return Proposal::Abort(format!(
                "the --exec command could not be started (sh -c): {error}"
            ));
        }
    };
    // Written from its own thread: a command that prints before it has read all of its
    // input must not wait on us, nor we on it.
    let stdin = child.stdin.take();
    let writer = std::thread::spawn(move || {
        if let Some(mut stdin) = stdin {
            // A command that does not read its input (EPIPE) is its own business.
            let _ = stdin.write_all(&input);
        }
    });
    let output = child.wait_with_output();
    let _ = writer.join();
    let output = match output {
        Ok(output) => output,
        Err(error) => return Proposal::Abort(format!("the --exec command failed: {error}")),
    };
    if !output.status.success() {
        let how = match output.status.code() {
            Some(code) => format!("exited with status {code}"),
            None => "was killed by a signal".to_string(),
        };
        return Proposal::Abort(format!("the --exec command {how}; nothing was written"));
    }
    match serde_json::from_slice::<Value>(&output.stdout) {
        Ok(object @ Value::Object(_)) => Proposal::Object(object),
        Ok(other) => Proposal::Invalid(format!(
            "the --exec command printed {}, not the object: it must print the whole new object as JSON",
            safewrite_mutation::type_name(&other)
        )),
        Err(error) => Proposal::Invalid(format!(
            "the --exec command's output is not one JSON object ({error}): it must print the whole new object as JSON"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_reads_the_object_and_proposes_its_output() {
        let fresh = r#"{"data": {"n": "1"}}"#.to_string();
        match run_blocking(r#"sed 's/"1"/"2"/'"#, fresh.clone().into_bytes()) {
            Proposal::Object(object) => assert_eq!(object["data"]["n"], "2"),
            other => panic!("{other:?}"),
        }
        match run_blocking("cat >/dev/null; exit 3", fresh.clone().into_bytes()) {
            Proposal::Abort(why) => assert!(why.contains("status 3"), "{why}"),
            other => panic!("{other:?}"),
        }
        match run_blocking("echo '[1]'", fresh.into_bytes()) {
            Proposal::Invalid(why) => assert!(why.contains("a list"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
