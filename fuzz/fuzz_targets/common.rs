//! Shared by the fuzz targets: a runtime for the async API, and the properties every
//! answer must have whatever the input.
#![allow(dead_code)] // each target uses part of it

use safewrite_api::target::FieldViolation;
use safewrite_mutation::cel::{COMPILER_PANICKED, EVALUATOR_PANICKED};
use safewrite_mutation::{ApplyError, CelError};

/// The longest message a CEL error may carry: an excerpt, never the whole source.
pub const MAX_MESSAGE: usize = 600;

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
}

/// Runs `future` to completion.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    RUNTIME.with(|runtime| runtime.block_on(future))
}

/// A refusal must be short and must not hide a panic of the compiler.
pub fn check_violation(violation: &FieldViolation) {
    // Equal, not contained: a refusal may quote the source, which may say anything.
    assert_ne!(
        violation.description, COMPILER_PANICKED,
        "the compiler panicked"
    );
    assert!(
        violation.description.len() <= MAX_MESSAGE,
        "a {}-byte message: {violation}",
        violation.description.len()
    );
}

/// An evaluation error must be short and must not hide a panic of the evaluator.
pub fn check_apply_error(error: &ApplyError) {
    assert_ne!(
        error,
        &ApplyError::Cel(CelError::Failed(EVALUATOR_PANICKED.into())),
        "the evaluator panicked"
    );
    let message = error.to_string();
    assert!(
        message.len() <= MAX_MESSAGE,
        "a {}-byte message: {message}",
        message.len()
    );
}
