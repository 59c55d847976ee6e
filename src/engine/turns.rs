//! Turns: the writes whose mutation is the caller's own code (Transact, `safewrite
//! update --exec`) to one object take turns, in arrival order, instead of racing each
//! other into conflicts. Each starts from the object as the one before it left it (the
//! remembered copy, see [`super::memory`]), so K writers to one object cost about one
//! write each. A turn is held for the whole loop of one write; a caller that stalls
//! holds it no longer than `--transact-idle-timeout`, and a writer waiting for its turn
//! gives up at its deadline. Declarative writes made alone (`write_alone`, exact
//! resourceVersion, server-side apply, `--no-group-commit`) do not wait for a turn:
//! they are quick, and a Transact's own code may make one to the same object (it would
//! wait for the turn its Transact holds).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

/// The objects whose writes are taking turns.
#[derive(Default)]
pub(super) struct Turns {
    objects: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

/// The turn of one write; the next writer's begins when it is dropped.
pub(super) struct Turn {
    guard: Option<OwnedMutexGuard<()>>,
    objects: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    key: String,
}

impl Turns {
    /// Waits for `key`'s turn, in arrival order (tokio's mutex is fair); `None` when
    /// `deadline` comes first.
    pub(super) async fn take(&self, key: &str, deadline: Option<Instant>) -> Option<Turn> {
        let lock = {
            let mut objects = self.objects.lock().expect("turns");
            objects.entry(key.to_string()).or_default().clone()
        };
        let guard = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, lock.lock_owned())
                .await
                .ok()?,
            None => lock.lock_owned().await,
        };
        Some(Turn {
            guard: Some(guard),
            objects: self.objects.clone(),
            key: key.to_string(),
        })
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.objects.lock().expect("turns").len()
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let guard = self.guard.take();
        let mut objects = self.objects.lock().expect("turns");
        drop(guard);
        // Nobody else holds or waits for the object: forget it.
        if let Some(lock) = objects.get(&self.key)
            && Arc::strong_count(lock) == 1
        {
            objects.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn writers_to_one_object_take_turns_in_arrival_order() {
        let turns = Arc::new(Turns::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = turns.take("a", None).await.unwrap();
        let mut waiting = Vec::new();
        for i in 0..5 {
            let (turns, order) = (turns.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let _turn = turns.take("a", None).await.unwrap();
                order.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }));
            tokio::task::yield_now().await;
        }
        // Another object is not held up.
        assert!(turns.take("b", Some(Instant::now())).await.is_some());
        drop(first);
        for task in waiting {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4]);
        assert_eq!(
            turns.len(),
            0,
            "no object is kept once its writers are done"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_writer_waiting_past_its_deadline_gives_up_and_the_next_goes_on() {
        let turns = Arc::new(Turns::default());
        let held = turns.take("a", None).await.unwrap();
        let late = turns
            .take("a", Some(Instant::now() + Duration::from_millis(50)))
            .await;
        assert!(late.is_none());
        drop(held);
        assert!(turns.take("a", Some(Instant::now())).await.is_some());
        assert_eq!(turns.len(), 0);
    }
}
