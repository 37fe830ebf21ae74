//! One reflector per kind for every controller group of a term, as client-go's shared
//! informer factory: the ReplicaSet, Job, DaemonSet, StatefulSet, EndpointSlice,
//! node lifecycle and volume controllers all follow pods or Nodes, and one mirror of
//! each (not one per group) is what the controller manager holds in memory and what the
//! API serves it as watches. Each group adds its own route (the keys it queues); a
//! route added after the mirror has listed is handed every object already in it, so a
//! group that starts late misses nothing.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use keelson_component::denied::DenialReporter;
use keelson_component::mirror::Change;
use keelson_component::Leadership;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::Resource;

/// Where one group wants the objects of a kind that changed.
type Route<K> = Box<dyn Fn(&K) + Send>;

/// The routes of one kind's mirror, and whether a late route must wait for a list to end
/// before it is handed the store (during a list the store still holds the previous one).
struct Routes<K> {
    routes: Vec<Route<K>>,
    /// Routes added during the current list, to be handed the store when it ends.
    waiting: Vec<usize>,
    listing: bool,
    listed_once: bool,
}

impl<K> Default for Routes<K> {
    fn default() -> Self {
        Routes { routes: Vec::new(), waiting: Vec::new(), listing: false, listed_once: false }
    }
}

impl<K> Routes<K> {
    /// Adds `route`; `stored` is what the mirror holds now (asked only when it is whole).
    fn add(&mut self, route: Route<K>, stored: impl FnOnce() -> Vec<Arc<K>>) {
        if self.listing {
            self.waiting.push(self.routes.len());
        } else {
            for o in stored() {
                route(&o);
            }
        }
        self.routes.push(route);
    }

    /// Hands one change the mirror's store has taken to every route; `stored` is the
    /// store after it. True when the change ends the mirror's first list.
    fn dispatch(&mut self, change: Change<'_, K>, stored: impl FnOnce() -> Vec<Arc<K>>) -> bool {
        match change {
            Change::Init => self.listing = true,
            Change::InitDone => {
                self.listing = false;
                let first = !std::mem::replace(&mut self.listed_once, true);
                if !self.waiting.is_empty() {
                    let objects = stored();
                    for i in std::mem::take(&mut self.waiting) {
                        objects.iter().for_each(|o| (self.routes[i])(o));
                    }
                }
                return first;
            }
            c => {
                if let Some(o) = c.object() {
                    self.routes.iter().for_each(|r| r(o));
                }
            }
        }
        false
    }
}

/// One kind's mirror.
struct Shared<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    routes: Arc<Mutex<Routes<K>>>,
}

/// The mirrors of one term, started at a group's first ask for a kind; they stop when
/// this is dropped or [`SharedReflectors::stop`] is called.
pub struct SharedReflectors {
    client: kube::Client,
    denials: Arc<DenialReporter>,
    kinds: Mutex<HashMap<TypeId, Box<dyn Any + Send + Sync>>>,
    /// How many mirrors have not finished their first list.
    unlisted: Arc<tokio::sync::watch::Sender<usize>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl SharedReflectors {
    pub fn new(term: &Leadership) -> Arc<Self> {
        Arc::new(SharedReflectors {
            client: term.client.clone(),
            denials: term.denials.clone(),
            kinds: Mutex::default(),
            unlisted: Arc::new(tokio::sync::watch::Sender::new(0)),
            tasks: Mutex::default(),
        })
    }

    /// The mirror of every `K` in the cluster; `route` is handed each object it takes
    /// from now on, and at once (or when the list under way ends) every one it holds.
    pub fn watch<K, F>(&self, route: F) -> Store<K>
    where
        K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
        F: Fn(&K) + Send + 'static,
    {
        let (store, routes) = self.shared::<K>();
        routes.lock().expect("routes lock").add(Box::new(route), || store.state());
        store
    }

    /// The mirror of every `K` in the cluster, for a group that reads it but reacts to
    /// none of its changes.
    pub fn store<K>(&self) -> Store<K>
    where
        K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    {
        self.shared::<K>().0
    }

    /// The kind's mirror, started on first use.
    fn shared<K>(&self) -> (Store<K>, Arc<Mutex<Routes<K>>>)
    where
        K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    {
        let mut kinds = self.kinds.lock().expect("kinds lock");
        let entry = kinds.entry(TypeId::of::<K>()).or_insert_with(|| Box::new(self.start::<K>()));
        let shared = entry.downcast_ref::<Shared<K>>().expect("a mirror is stored under its own kind");
        (shared.store.clone(), shared.routes.clone())
    }

    fn start<K>(&self) -> Shared<K>
    where
        K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    {
        let (store, writer) = reflector::store();
        let routes: Arc<Mutex<Routes<K>>> = Arc::default();
        let (to, stored) = (routes.clone(), store.clone());
        let unlisted = self.unlisted.clone();
        unlisted.send_modify(|n| *n += 1);
        let route = move |c: Change<'_, K>| {
            if to.lock().expect("routes lock").dispatch(c, || stored.state()) {
                unlisted.send_modify(|n| *n -= 1);
            }
        };
        let api = Api::<K>::all(self.client.clone());
        let task = keelson_component::mirror::routed_reflector_into(writer, api, watcher::Config::default(), route, crate::informers::watch_error_reporter(self.denials.clone()));
        self.tasks.lock().expect("tasks lock").push(task);
        Shared { store, routes }
    }

    /// Returns once every mirror asked for so far has finished its first list: a group
    /// asks for its kinds, then waits here before it acts on what they hold. (Not the
    /// stores' own `wait_until_ready`: a kube-rs store wakes only the last of several
    /// tasks waiting on it, and these stores are waited on by several groups.)
    pub async fn listed(&self) {
        let _ = self.unlisted.subscribe().wait_for(|n| *n == 0).await;
    }

    /// Stops every mirror (the term ended).
    pub fn stop(&self) {
        for t in self.tasks.lock().expect("tasks lock").drain(..) {
            t.abort();
        }
    }
}

impl Drop for SharedReflectors {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen() -> (Arc<Mutex<Vec<u32>>>, Route<u32>) {
        let got: Arc<Mutex<Vec<u32>>> = Arc::default();
        let g = got.clone();
        (got, Box::new(move |o: &u32| g.lock().unwrap().push(*o)))
    }

    fn objects(v: &[u32]) -> Vec<Arc<u32>> {
        v.iter().copied().map(Arc::new).collect()
    }

    #[test]
    fn a_route_added_before_the_first_list_sees_it_as_it_comes() {
        let mut r = Routes::default();
        let (got, route) = seen();
        r.add(route, || objects(&[]));
        r.dispatch(Change::Init, || unreachable!());
        r.dispatch(Change::InitApply(&1), || unreachable!());
        r.dispatch(Change::InitApply(&2), || unreachable!());
        assert!(r.dispatch(Change::InitDone, || objects(&[1, 2])), "the first list ended");
        r.dispatch(Change::Apply(&3), || unreachable!());
        r.dispatch(Change::Delete(&1), || unreachable!());
        assert_eq!(*got.lock().unwrap(), vec![1, 2, 3, 1]);
    }

    #[test]
    fn a_route_added_after_the_list_is_handed_the_store_then_every_change() {
        let mut r = Routes::default();
        let (first, route) = seen();
        r.add(route, || objects(&[]));
        r.dispatch(Change::Init, || unreachable!());
        r.dispatch(Change::InitApply(&1), || unreachable!());
        r.dispatch(Change::InitDone, || objects(&[1]));
        let (late, route) = seen();
        r.add(route, || objects(&[1, 7]));
        r.dispatch(Change::Apply(&8), || unreachable!());
        assert_eq!(*late.lock().unwrap(), vec![1, 7, 8]);
        assert_eq!(*first.lock().unwrap(), vec![1, 8]);
    }

    #[test]
    fn a_route_added_during_a_list_is_handed_the_whole_new_store_when_it_ends() {
        let mut r = Routes::default();
        r.dispatch(Change::Init, || unreachable!());
        r.dispatch(Change::InitApply(&1), || unreachable!());
        let (late, route) = seen();
        // Mid-list, the store still holds the previous list: nothing to hand yet.
        r.add(route, || panic!("the store is not read during a list"));
        r.dispatch(Change::InitApply(&2), || unreachable!());
        r.dispatch(Change::InitDone, || objects(&[1, 2]));
        assert_eq!(*late.lock().unwrap(), vec![2, 1, 2]);
        // A relist later: routes are not handed the store again.
        r.dispatch(Change::Init, || unreachable!());
        r.dispatch(Change::InitApply(&5), || unreachable!());
        assert!(!r.dispatch(Change::InitDone, || panic!("no route waits")), "not the first list");
        assert_eq!(*late.lock().unwrap(), vec![2, 1, 2, 5]);
    }
}
