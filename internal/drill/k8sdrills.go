package drill

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/kubenode/kubestack"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/operator"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// lostBound is how long after an instance is lost its cell's new
// requests may still fail: the routers' health checks take it out within
// a second (HostLoss).
const lostBound = 1500 * time.Millisecond

// podFault is a fault on one pod: act, at the end of the baseline, hits
// pod (as it was then), marked what; back says, from the pod as it is
// now (nil: none), whether it is back, marked backWhat. The load runs
// until then and After more. It returns the load's result and when the
// fault and the return were, on the load's clock.
func (n *k8sRun) podFault(ctx context.Context, name, what, backWhat string, pod *corev1.Pod,
	act func(context.Context) error, back func(*corev1.Pod) bool) (res *loadtest.Result, faultAt, backAt time.Duration, err error) {
	c := n.c
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	wait := startLoad(lctx, n.r)
	actErr := func() error {
		if err := sleepUntil(ctx, n.r, c.Baseline); err != nil {
			return err
		}
		if err := act(ctx); err != nil {
			return err
		}
		faultAt = n.r.Elapsed()
		n.r.Mark(what)
		c.logf("%s at %.1fs", what, faultAt.Seconds())
		if err := until(ctx, c.Within, backWhat, func(ctx context.Context) (bool, error) {
			p, err := n.pod(ctx, pod.Name)
			return err == nil && back(p), err
		}); err != nil {
			return err
		}
		backAt = n.r.Elapsed()
		n.r.Mark(backWhat)
		c.logf("%s at %.1fs", backWhat, backAt.Seconds())
		return sleepUntil(ctx, n.r, backAt+c.After)
	}()
	stop()
	res, err = loadEnded(name, wait, actErr)
	return res, faultAt, backAt, err
}

// readyPod is the pod of the drill's cell and instance, which must be
// ready.
func (n *k8sRun) readyPod(ctx context.Context) (*corev1.Pod, error) {
	name := operator.PodName(n.c.Cell, n.c.Instance)
	p, err := n.pod(ctx, name)
	switch {
	case err != nil:
		return nil, err
	case p == nil:
		return nil, fmt.Errorf("no pod %s in namespace %s", name, kubestack.Namespace)
	case !podReady(p):
		return nil, fmt.Errorf("pod %s is not ready: a drill starts from a serving stack", name)
	}
	return p, nil
}

// checkHitCell checks that the hit cell's users saw errors only for
// requests sent within lostBound of the fault, and notes the first
// ErrorWindow.
func (n *k8sRun) checkHitCell(d *loadtest.Verdict, res *loadtest.Result, cells map[int]string, faultAt, end time.Duration) {
	c := n.c
	victim := func(u int) bool { return cells[u] == c.Cell }
	after := loadtest.Window{From: faultAt + lostBound, To: end, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+"'s errors for requests sent from "+lostBound.String()+" after the fault", after.Errors == 0 && after.N > 0,
		fmt.Sprintf("%d of %d %v", after.Errors, after.N, after.Status), "0")
	early := loadtest.Window{From: faultAt, To: faultAt + c.ErrorWindow, Users: victim}.Stats(res.Samples)
	d.Note("%s in the first %s: %d errors of %d %v, p50 %s, p99 %s", c.Cell, c.ErrorWindow, early.Errors, early.N, early.Status, msf(early.P50), msf(early.P99))
	base := loadtest.Window{To: faultAt, Users: victim}.Stats(res.Samples)
	d.Note("%s p50/p99: baseline %s/%s", c.Cell, msf(base.P50), msf(base.P99))
}

// finish notes the error answers by kind, verifies the accepted ids and
// ends the verdict.
func (n *k8sRun) finish(ctx context.Context, d *loadtest.Verdict, res *loadtest.Result) {
	if kinds := errorKinds(res.Samples); kinds != "" {
		d.Note("error answers by kind: %s", kinds)
	}
	n.c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	d.CheckVerification(n.r.Verify(ctx, res.Samples, n.c.VerifyWithin, n.c.Replays))
	d.Finish()
	res.Drill = d
}

// PodDelete: one pod of a cell deleted as Kubernetes deletes it (its
// grace period: the instance leaves the routers' rotation, drains and
// stops, its JetStream node after it); its StatefulSet makes it again.
// The other cells are untouched; the cell's users see errors only for
// requests sent within lostBound of the deletion; every accepted inquiry
// ends final, none twice.
func PodDelete(ctx context.Context, c K8sConfig) (*loadtest.Result, error) {
	c = c.withDefaults()
	n, err := newK8sRun(ctx, &c, c.Baseline+c.Within+c.After)
	if err != nil {
		return nil, err
	}
	defer n.close()
	pod, err := n.readyPod(ctx)
	if err != nil {
		return nil, err
	}
	res, delAt, backAt, err := n.podFault(ctx, "k8s-pod-delete", pod.Name+" deleted", pod.Name+" ready", pod,
		func(ctx context.Context) error { return n.kc.Delete(ctx, pod) },
		func(p *corev1.Pod) bool { return p != nil && p.UID != pod.UID && podReady(p) })
	if err != nil {
		return res, err
	}
	end := n.r.Elapsed()
	d := &loadtest.Verdict{Name: "k8s-pod-delete"}
	cells := usersOf(res, delAt)
	checkOthers(d, res, cells, []string{c.Cell}, delAt, end)
	n.checkHitCell(d, res, cells, delAt, end)
	d.Note("%s made again and ready %.1fs after its deletion", pod.Name, (backAt - delAt).Seconds())
	n.finish(ctx, d, res)
	return res, nil
}

// NATSKill: the JetStream node of one pod of a cell killed (SIGKILL to
// its container's task, through the node's containerd: a node that dies,
// not a pod deleted); the kubelet starts it again and it catches up with
// its cluster. As on the network lab: latency, not errors — the cell's
// users see errors only for requests sent within lostBound of the kill;
// the other cells are untouched; nothing lost or duplicated.
func NATSKill(ctx context.Context, c K8sConfig) (*loadtest.Result, error) {
	c = c.withDefaults()
	n, err := newK8sRun(ctx, &c, c.Baseline+c.Within+c.After)
	if err != nil {
		return nil, err
	}
	defer n.close()
	pod, err := n.readyPod(ctx)
	if err != nil {
		return nil, err
	}
	nats, ok := containerStatus(pod, "nats")
	if !ok || !strings.HasPrefix(nats.ContainerID, "containerd://") {
		return nil, fmt.Errorf("pod %s has no running nats container (%q)", pod.Name, nats.ContainerID)
	}
	id := strings.TrimPrefix(nats.ContainerID, "containerd://")
	res, killAt, backAt, err := n.podFault(ctx, "k8s-nats-kill", pod.Name+"'s nats killed", pod.Name+" ready", pod,
		func(ctx context.Context) error {
			_, err := n.rec.Ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
			return err
		},
		func(p *corev1.Pod) bool {
			s, ok := containerStatus(p, "nats")
			return ok && s.RestartCount > nats.RestartCount && s.Started != nil && *s.Started && podReady(p)
		})
	if err != nil {
		return res, err
	}
	end := n.r.Elapsed()
	d := &loadtest.Verdict{Name: "k8s-nats-kill"}
	cells := usersOf(res, killAt)
	checkOthers(d, res, cells, []string{c.Cell}, killAt, end)
	n.checkHitCell(d, res, cells, killAt, end)
	d.Note("%s's nats started again and the pod ready %.1fs after the kill", pod.Name, (backAt - killAt).Seconds())
	n.finish(ctx, d, res)
	return res, nil
}

// containerStatus is the status of p's container (or sidecar) name.
func containerStatus(p *corev1.Pod, name string) (corev1.ContainerStatus, bool) {
	if p == nil {
		return corev1.ContainerStatus{}, false
	}
	for _, s := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if s.Name == name {
			return s, true
		}
	}
	return corev1.ContainerStatus{}, false
}

// RouterReplace: one router pod deleted under load (its grace: readiness
// fails, --shutdown-delay while the Service's endpoints drop it, then its
// connections drained); the Deployment makes another. Through the
// Service, no request fails: none refused, none cut.
func RouterReplace(ctx context.Context, c K8sConfig) (*loadtest.Result, error) {
	c = c.withDefaults()
	n, err := newK8sRun(ctx, &c, c.Baseline+c.Within+c.After)
	if err != nil {
		return nil, err
	}
	defer n.close()
	routers := func(ctx context.Context) ([]corev1.Pod, error) {
		var pods corev1.PodList
		err := n.kc.List(ctx, &pods, client.InNamespace(kubestack.Namespace), client.MatchingLabels{operator.LabelName: "router"})
		slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		return pods.Items, err
	}
	var dep appsv1.Deployment
	if err := n.kc.Get(ctx, client.ObjectKey{Namespace: kubestack.Namespace, Name: "cellkit-router"}, &dep); err != nil {
		return nil, err
	}
	want := ptr.Deref(dep.Spec.Replicas, 1)
	pods, err := routers(ctx)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return podReady(&p) })
	if i < 0 {
		return nil, fmt.Errorf("no ready router pod")
	}
	victim := pods[i]
	var replacement string
	res, delAt, backAt, err := n.podFault(ctx, "k8s-router-replace", victim.Name+" deleted", "routers ready", &victim,
		func(ctx context.Context) error { return n.kc.Delete(ctx, &victim) },
		func(*corev1.Pod) bool {
			// Back: the deleted pod gone, as many ready routers as the
			// Deployment wants, one of them new.
			gone, err := n.pod(ctx, victim.Name)
			if err != nil || gone != nil {
				return false
			}
			now, err := routers(ctx)
			if err != nil {
				return false
			}
			ready := 0
			for _, p := range now {
				if podReady(&p) {
					ready++
					if !slices.ContainsFunc(pods, func(q corev1.Pod) bool { return q.UID == p.UID }) {
						replacement = p.Name
					}
				}
			}
			return ready == int(want) && replacement != ""
		})
	if err != nil {
		return res, err
	}
	end := n.r.Elapsed()
	d := &loadtest.Verdict{Name: "k8s-router-replace"}
	all := loadtest.Window{From: delAt, To: end}.Stats(res.Samples)
	refused := 0
	for _, s := range res.Samples {
		if s.At >= delAt && s.Status == 0 {
			refused++
		}
	}
	d.Check("requests not answered (refused, reset, timed out) from the deletion on", refused == 0, fmt.Sprint(refused), "0")
	d.Check("errors from the deletion on", all.Errors == 0 && all.N > 0, fmt.Sprintf("%d of %d %v", all.Errors, all.N, all.Status), "0")
	base := loadtest.Window{To: delAt}.Stats(res.Samples)
	d.Note("p50/p99: baseline %s/%s, from the deletion on %s/%s", msf(base.P50), msf(base.P99), msf(all.P50), msf(all.P99))
	d.Note("%s deleted; %s ready and %d of %d routers ready %.1fs later", victim.Name, replacement, want, want, (backAt - delAt).Seconds())
	n.finish(ctx, d, res)
	return res, nil
}

// CellAdd: a new Cell (a copy of the first cell's spec) created under
// load. Its pods start; the operator puts it in the map only once every
// instance runs (its cell started), and slots move to it then with
// their users' inquiries; its users, moved from the other cells, see no
// error but the fence's (503 user-moving with Retry-After, while their
// last messages are copied), the others none; every accepted inquiry
// ends final.
// One piece: a script on one timeline (created, in the map), then its checks.
func CellAdd(ctx context.Context, c K8sConfig) (*loadtest.Result, error) {
	c = c.withDefaults()
	n, err := newK8sRun(ctx, &c, c.Baseline+c.Within+c.After)
	if err != nil {
		return nil, err
	}
	defer n.close()
	cells, err := n.cells(ctx)
	if err != nil {
		return nil, err
	}
	if len(cells) == 0 {
		return nil, fmt.Errorf("no Cell in namespace %s", kubestack.Namespace)
	}
	if slices.ContainsFunc(cells, func(x v1alpha1.Cell) bool { return x.Name == c.NewCell }) {
		return nil, fmt.Errorf("the Cell %s exists already (k8s-cell-delete deletes it)", c.NewCell)
	}
	before, err := n.ctl.Load(ctx)
	if err != nil {
		return nil, err
	}
	nc := &v1alpha1.Cell{
		ObjectMeta: metav1.ObjectMeta{Name: c.NewCell, Namespace: kubestack.Namespace, Labels: cells[0].Labels},
		Spec:       *cells[0].Spec.DeepCopy(),
	}
	nc.Spec.Drained = false
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	wait := startLoad(lctx, n.r)
	var createAt, inMapAt time.Duration
	var added *v1alpha1.Cell
	actErr := func() error {
		if err := sleepUntil(ctx, n.r, c.Baseline); err != nil {
			return err
		}
		if err := n.kc.Create(ctx, nc); err != nil {
			return err
		}
		createAt = n.r.Elapsed()
		n.r.Mark(c.NewCell + " created")
		c.logf("Cell %s created at %.1fs", c.NewCell, createAt.Seconds())
		if err := until(ctx, c.Within, c.NewCell+" ready and in the map", func(ctx context.Context) (bool, error) {
			x, err := n.cell(ctx, c.NewCell)
			if err != nil {
				return false, err
			}
			added = x
			in, ready := condition(x, v1alpha1.ConditionInMap), condition(x, v1alpha1.ConditionReady)
			return in != nil && in.True && ready != nil && ready.True, nil
		}); err != nil {
			return err
		}
		inMapAt = n.r.Elapsed()
		n.r.Mark(c.NewCell + " in the map")
		c.logf("%s ready and in the map at %.1fs", c.NewCell, inMapAt.Seconds())
		return sleepUntil(ctx, n.r, inMapAt+c.After)
	}()
	stop()
	res, err := loadEnded("k8s-cell-add", wait, actErr)
	if err != nil {
		return res, err
	}
	end := n.r.Elapsed()
	d := &loadtest.Verdict{Name: "k8s-cell-add"}
	d.Check(c.NewCell+" ready and in the map", inMapAt > 0, fmt.Sprintf("%.1fs after its creation", (inMapAt-createAt).Seconds()), "within "+c.Within.String())
	// Only once ready: each of its instances had started before the map
	// named the cell.
	provisioned := condition(added, v1alpha1.ConditionInMap).Since
	pods, err := n.cellPods(ctx, c.NewCell)
	if err != nil {
		return res, err
	}
	started, starts := startedBy(pods, provisioned)
	d.Check(c.NewCell+"'s instances running before it was put in the map", started == int(nc.Spec.Instances) && len(pods) == started,
		fmt.Sprintf("%d of %d started before %s (%s)", started, len(pods), provisioned.UTC().Format("15:04:05"), strings.Join(starts, ", ")), "all")
	// Who moved, by the maps before and after (a user is no sample of
	// its own in every window).
	after, err := n.ctl.Load(ctx)
	if err != nil {
		return res, err
	}
	moved := func(u int) bool {
		id := loadtest.UserID(u)
		return after.Lookup(id).Cell == c.NewCell && before.Lookup(id).Cell != c.NewCell
	}
	movedStats := loadtest.Window{From: createAt, To: end, Users: moved}.Stats(res.Samples)
	checkMoved(d, "the users moved to "+c.NewCell, movedStats)
	nmoved := 0
	for u := range c.Users {
		if moved(u) {
			nmoved++
		}
	}
	stayed := loadtest.Window{From: createAt, To: end, Users: func(u int) bool { return !moved(u) }}.Stats(res.Samples)
	d.Check("the other users' errors from the creation on", stayed.Errors == 0 && stayed.N > 0, fmt.Sprintf("%d of %d %v", stayed.Errors, stayed.N, stayed.Status), "0")
	d.Note("%d of %d users moved to %s", nmoved, c.Users, c.NewCell)
	if evs, err := n.events(ctx, c.NewCell, nc.CreationTimestamp.Time); err == nil {
		for _, e := range evs {
			d.Note("event on %s: %s", c.NewCell, e)
		}
	}
	n.finish(ctx, d, res)
	return res, nil
}

// startedBy counts the pods whose cell container runs since at or before
// t, and lists each running one's start.
func startedBy(pods []corev1.Pod, t time.Time) (int, []string) {
	started := 0
	var starts []string
	for i := range pods {
		s, ok := containerStatus(&pods[i], "cell")
		if !ok || s.State.Running == nil {
			continue
		}
		if !s.State.Running.StartedAt.After(t) {
			started++
		}
		starts = append(starts, fmt.Sprintf("%s %s", pods[i].Name, s.State.Running.StartedAt.UTC().Format("15:04:05")))
	}
	return started, starts
}

// CellDelete: the Cell NewCell deleted under load. The operator drains
// it first (its slots move away with their users' inquiries, its
// in-flight work ends, what remains is swept to the users' cells: the
// map marks it drained only then), then takes it out of the map, then
// its objects go. Its users are served elsewhere with no error but the
// fence's throughout, the removal included, and every inquiry ends
// final. Once it has gone, what it accepted reads final through the
// routers and a keyed retry gets the same id: its users' data moved with
// them.
// One piece: a script on one timeline (deleted, drained, removed, gone), then its checks.
func CellDelete(ctx context.Context, c K8sConfig) (*loadtest.Result, error) {
	c = c.withDefaults()
	n, err := newK8sRun(ctx, &c, c.Baseline+3*c.Within+c.After)
	if err != nil {
		return nil, err
	}
	defer n.close()
	victim, err := n.cell(ctx, c.NewCell)
	if err != nil {
		return nil, fmt.Errorf("%w (k8s-cell-add makes it)", err)
	}
	if in := condition(victim, v1alpha1.ConditionInMap); in == nil || !in.True {
		return nil, fmt.Errorf("the Cell %s is not in the map", c.NewCell)
	}
	before, err := n.ctl.Load(ctx)
	if err != nil {
		return nil, err
	}
	inMap := func(ctx context.Context) (slotmap.Cell, bool, error) {
		m, err := n.ctl.Load(ctx)
		if err != nil {
			return slotmap.Cell{}, false, err
		}
		mc, ok := m.Cell(c.NewCell)
		return mc, ok, nil
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	wait := startLoad(lctx, n.r)
	var delAt, drainedAt, removedAt, goneAt time.Duration
	actErr := func() error {
		if err := sleepUntil(ctx, n.r, c.Baseline); err != nil {
			return err
		}
		if err := n.kc.Delete(ctx, victim); err != nil {
			return err
		}
		delAt = n.r.Elapsed()
		n.r.Mark(c.NewCell + " deleted")
		c.logf("Cell %s deleted at %.1fs", c.NewCell, delAt.Seconds())
		if err := until(ctx, c.Within, c.NewCell+" drained in the map", func(ctx context.Context) (bool, error) {
			mc, ok, err := inMap(ctx)
			return ok && mc.State == slotmap.Drained, err
		}); err != nil {
			return err
		}
		drainedAt = n.r.Elapsed()
		n.r.Mark(c.NewCell + " drained")
		c.logf("%s drained at %.1fs", c.NewCell, drainedAt.Seconds())
		if err := until(ctx, c.Within, c.NewCell+" out of the map", func(ctx context.Context) (bool, error) {
			_, ok, err := inMap(ctx)
			return !ok, err
		}); err != nil {
			return err
		}
		removedAt = n.r.Elapsed()
		n.r.Mark(c.NewCell + " removed")
		c.logf("%s out of the map at %.1fs", c.NewCell, removedAt.Seconds())
		if err := until(ctx, c.Within, c.NewCell+" and its StatefulSet gone", func(ctx context.Context) (bool, error) {
			var sts appsv1.StatefulSet
			_, err := n.cell(ctx, c.NewCell)
			if !apierrors.IsNotFound(err) {
				return false, err
			}
			err = n.kc.Get(ctx, client.ObjectKey{Namespace: kubestack.Namespace, Name: operator.ObjectName(c.NewCell)}, &sts)
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}); err != nil {
			return err
		}
		goneAt = n.r.Elapsed()
		n.r.Mark(c.NewCell + " gone")
		c.logf("%s gone at %.1fs", c.NewCell, goneAt.Seconds())
		return sleepUntil(ctx, n.r, goneAt+c.After)
	}()
	stop()
	res, err := loadEnded("k8s-cell-delete", wait, actErr)
	if err != nil {
		return res, err
	}
	end := n.r.Elapsed()
	d := &loadtest.Verdict{Name: "k8s-cell-delete"}
	states, err := n.statesSince(ctx, c.NewCell, before.Version())
	if err != nil {
		return res, err
	}
	d.Check(c.NewCell+" in the map: drained before it was removed", slices.Equal(states, []string{"draining", "drained", "removed"}),
		strings.Join(states, " → "), "draining → drained → removed")
	d.Note("%s drained %.1fs after its deletion, out of the map %.1fs after that, its Cell and StatefulSet gone %.1fs later",
		c.NewCell, (drainedAt - delAt).Seconds(), (removedAt - drainedAt).Seconds(), (goneAt - removedAt).Seconds())
	cells := usersOf(res, delAt)
	mine := func(u int) bool { return cells[u] == c.NewCell }
	st := loadtest.Window{From: delAt, To: end, Users: mine}.Stats(res.Samples)
	checkMoved(d, c.NewCell+"'s users from the deletion on", st)
	around := loadtest.Window{From: removedAt - c.After, To: end, Users: mine}.Stats(res.Samples)
	d.Note("%s's users around its removal (from %.0fs before): %d of %d errors", c.NewCell, c.After.Seconds(), around.Errors, around.N)
	still := 0
	for _, cell := range loadtest.UserCells(res.Samples, goneAt, end) {
		if cell == c.NewCell {
			still++
		}
	}
	d.Check(c.NewCell+" answers no one once gone", still == 0, fmt.Sprintf("%d users", still), "0")
	checkOthers(d, res, cells, []string{c.NewCell}, delAt, end)
	if evs, err := n.events(ctx, c.NewCell, victim.CreationTimestamp.Time); err == nil {
		for _, e := range evs {
			d.Note("event on %s: %s", c.NewCell, e)
		}
	}
	// Every inquiry is verified as in every drill, the deleted cell's
	// too: read after it has gone, through the cells its users moved to,
	// with keyed retries that must get the same id.
	var gone []loadtest.Sample
	for _, s := range res.Samples {
		if s.Cell == c.NewCell && s.ID != "" && !s.Read {
			gone = append(gone, s)
		}
	}
	v := n.r.Verify(ctx, gone, c.VerifyWithin, min(len(gone), 50))
	d.Check(c.NewCell+"'s inquiries read after it has gone: lost", v.Accepted > 0 && v.Lost == 0 && v.Unfinished == 0,
		fmt.Sprintf("%d lost, %d unfinished of %d", v.Lost, v.Unfinished, v.Accepted), "0")
	d.Check(c.NewCell+"'s keyed retries after it has gone: a new id", v.ReplayNewID == 0,
		fmt.Sprintf("%d of %d", v.ReplayNewID, v.Replayed), "0")
	n.finish(ctx, d, res)
	return res, nil
}

// statesSince is cell's state in each version of the map after version
// from (draining, drained, removed; active where it was), each change
// once, read from the map's history.
func (n *k8sRun) statesSince(ctx context.Context, cell string, from int64) ([]string, error) {
	h := n.ctl.History()
	if h == nil {
		return nil, fmt.Errorf("the registry %s keeps no history of the map", n.st.Registry)
	}
	versions, err := h.Versions(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range versions {
		if v <= from {
			continue
		}
		m, err := h.Load(ctx, v)
		if err != nil {
			return nil, err
		}
		state := "removed"
		if mc, ok := m.Cell(cell); ok {
			state = string(mc.State)
		}
		if len(out) == 0 || out[len(out)-1] != state {
			out = append(out, state)
		}
	}
	return out, nil
}
