//! The member of a write: one request carried by the loop, alone or in a batch with
//! others to the same object. It holds what the request asks for, its attempts so far,
//! how its change is made (its declarative mutation, or the caller's own code), and
//! where its answer goes.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::oneshot;
use tracing::Span;

use safewrite_api::deadline::AnswerBy;
use safewrite_api::target::ObjectPath;
use safewrite_client::apiserver::Answer;
use safewrite_client::discovery::Resolved;

use super::resolve::Start;
use crate::attempt_log::AttemptLog;
use crate::error::{Failure, WriteError};
use crate::result::{Done, Written};
use crate::spans::{record_done, record_failure};
use crate::spec::{Change, Declarative, Mutator, WriteSpec};

/// One request waiting in, or carried by, a batch.
pub(crate) struct Member {
    pub spec: WriteSpec,
    /// The caller's own code, when it supplies the change instead of `spec.mutation`.
    pub own: Option<Box<dyn OwnCode>>,
    pub resolved: Arc<Resolved>,
    pub request: ObjectPath,
    pub attempts: AttemptLog,
    /// The member's RPC span: the batch's attempt spans are children of the first
    /// member's and link the others'.
    pub span: Span,
    answer: oneshot::Sender<Result<Written, WriteError>>,
    /// Must be written on its own (a create, isolating an offender, or a write that
    /// may not share).
    pub isolated: bool,
}

/// The answer of a member, once its batch has one for it.
pub(crate) type Answered = oneshot::Receiver<Result<Written, WriteError>>;

impl Member {
    /// A member in the current span, and where its answer will arrive.
    pub(crate) fn new(
        spec: WriteSpec,
        own: Option<Box<dyn OwnCode>>,
        start: Start,
    ) -> (Self, Answered) {
        let (answer, answered) = oneshot::channel();
        let member = Member {
            spec,
            own,
            resolved: start.resolved,
            request: start.request,
            attempts: start.attempts,
            span: Span::current(),
            answer,
            isolated: false,
        };
        (member, answered)
    }

    pub(crate) fn gone(&self) -> bool {
        self.answer.is_closed()
    }

    /// What makes this member's change in its current attempt.
    pub(crate) fn fold_entry(&mut self) -> FoldEntry<'_> {
        FoldEntry {
            attempt: self.attempts.made(),
            mutator: MemberMutator {
                spec: &self.spec,
                own: self.own.as_deref_mut().map(|own| own as &mut dyn OwnCode),
                deadline: self.attempts.deadline,
            },
        }
    }

    /// Notes an answer (the write's, or that of a read that ended the attempt) in the
    /// record of this member's current attempt.
    pub(crate) fn note(&mut self, answer: &Answer) {
        self.attempts.current().note(answer);
    }

    /// Answers the caller.
    pub(crate) fn finish(self, result: Result<Done, Failure>) {
        let result = match result {
            Ok(done) => Ok(self.attempts.finish(done)),
            Err(failure) => Err(self.attempts.fail(failure)),
        };
        // A caller that went away no longer listens; nothing to do then.
        let _ = self.answer.send(result);
    }

    /// Answers the caller at the end of an attempt, noting the end on the attempt's
    /// span (the current one).
    pub(crate) fn answer(self, result: Result<Done, Failure>) {
        let span = Span::current();
        match &result {
            Ok(done) => record_done(&span, done),
            Err(failure) => record_failure(&span, "final", failure),
        }
        self.finish(result);
    }
}

/// The caller's own code as a member's mutation (Transact, `--exec`): a [`Mutator`]
/// behind a pointer, so that one loop carries it and declarative members alike.
pub(crate) trait OwnCode: Send {
    fn propose<'a>(
        &'a mut self,
        attempt: u32,
        fresh: &'a Value,
        creating: bool,
    ) -> futures::future::BoxFuture<'a, Result<Change, Failure>>;
}

impl<M: Mutator> OwnCode for M {
    fn propose<'a>(
        &'a mut self,
        attempt: u32,
        fresh: &'a Value,
        creating: bool,
    ) -> futures::future::BoxFuture<'a, Result<Change, Failure>> {
        Box::pin(self.mutate(attempt, fresh, creating))
    }
}

/// What makes one member's change: its declarative mutation, or the caller's own code.
pub(crate) struct MemberMutator<'a> {
    pub spec: &'a WriteSpec,
    pub own: Option<&'a mut dyn OwnCode>,
    pub deadline: AnswerBy,
}

impl Mutator for MemberMutator<'_> {
    async fn mutate(
        &mut self,
        attempt: u32,
        fresh: &Value,
        creating: bool,
    ) -> Result<Change, Failure> {
        if let Some(own) = &mut self.own {
            return own.propose(attempt, fresh, creating).await;
        }
        match &self.spec.mutation {
            Some(mutation) => {
                Declarative(mutation, self.deadline)
                    .mutate(attempt, fresh, creating)
                    .await
            }
            None => Err(Failure::Cancelled(crate::error::Cancel::NoMutation)),
        }
    }
}

/// One member's turn in a fold: its attempt's number and what makes its change.
pub(crate) struct FoldEntry<'a> {
    pub attempt: u32,
    pub mutator: MemberMutator<'a>,
}
