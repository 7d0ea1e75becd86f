package console_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/console"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/devstack/devctl"
	"github.com/cellkit/cellkit/internal/drill"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "copy the browser test's screenshots into docs/console")

// Budgets of the console's first view on the local stack.
const (
	firstViewBudget = time.Second
	assetsBudget    = 300 << 10
)

// browser finds what the browser test drives: Debian's Chromium and the
// playwright-core that make tools installs into bin/browser, and node. It
// skips the test, saying why, where they are not.
func browser(t *testing.T, root string) (node, chromium, playwright string) {
	t.Helper()
	dir := filepath.Join(root, "bin", "browser")
	if why, err := os.ReadFile(filepath.Join(dir, "unavailable")); err == nil {
		t.Skipf("the browser is not installed here: %s", strings.TrimSpace(string(why)))
	}
	chromium = cmpOr(os.Getenv("CELLKIT_CHROMIUM"), "/usr/bin/chromium")
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("no Chromium at %s (make tools installs Debian's): %v", chromium, err)
	}
	playwright = filepath.Join(dir, "node_modules", "playwright-core")
	if _, err := os.Stat(filepath.Join(playwright, "package.json")); err != nil {
		t.Skipf("no playwright-core in %s (make tools installs it): %v", dir, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("no node to run Playwright: %v", err)
	}
	return node, chromium, playwright
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestConsoleInABrowser opens the console of a real local stack (`cellctl
// dev up` starts it) in headless Chromium under load: without the token
// it is a 401 with no data; with it the cells render with their real
// releases and rates, the legend has the map's slot counts, a lookup says
// where u-42 goes and why; a drain moves slots on the page and in its
// history; a rollout's record shows wave by wave with its gates and the
// time left in the bake; a killed cell's card turns red within seconds, keeping its last
// figures; a registry that cannot be read is said so, the last map kept; a
// router announced at an admin URL the console does not trust is listed
// as not asked, and is not called; Sign out ends a session (another
// browser's goes on), and wrong tokens in the sign-in form are limited
// (then even the right one is a 429); a console that stops leaves its
// last view on the page, with its age.
// The first view must render within 1 s and the page's assets weigh under
// 300 KiB. Screenshots are kept in var/artifacts/console (and copied into
// docs/console with -update-screenshots).
func TestConsoleInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the local stack and a browser")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	node, chromium, playwright := browser(t, root)
	ctx := testkit.Context(t, 4*time.Minute)
	st, err := drill.StartStack(ctx, filepath.Join(root, "bin"), "--cells", "4")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Stop(context.Background()) })
	if st.Console == "" {
		t.Fatal("dev up started no console")
	}
	tok, err := os.ReadFile(st.ConsoleToken)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	// The token is read from a file: its start-up line does not print it.
	if log, err := os.ReadFile(filepath.Join(st.Dir, "logs", "console.log")); err != nil || !strings.Contains(string(log), "Console: ") ||
		strings.Contains(string(log), token) {
		t.Errorf("the console's log (%v) has no start-up line, or holds the token:\n%s", err, log)
	}

	// Without the token, from Go too: 401 and no data.
	resp, err := http.Get(st.Console + "api/view")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), `"c1"`) {
		t.Fatalf("GET /api/view without the token: %d %s, want 401 and no data", resp.StatusCode, body)
	}

	celltest.Load(t, ctx, loadtest.Config{Target: st.Router, Key: st.APIKey,
		Steps: []loadtest.Step{{Rate: 20, For: 3 * time.Minute}}, Users: 200})

	reg, err := registry.Open(registry.Config{URL: st.Registry}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	m, err := reg.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin := adminclient.Client{HTTP: &http.Client{}}
	expect := map[string]any{
		"base": st.Console, "token": token, "chromium": chromium, "playwright": playwright,
		"cells": st.Cells(), "routers": 1, "agencies": []string{"nice", "kcb"}, "client": devctl.KeyClient,
	}
	release, slots := map[string]string{}, map[string]int{}
	for _, c := range m.Cells() {
		s, err := admin.Status(ctx, c.Admin)
		if err != nil {
			t.Fatal(err)
		}
		release[c.ID] = s.Release.ID
	}
	for id, n := range m.SlotCounts() {
		slots[id] = n
	}
	route := m.Lookup("u-42")
	expect["release"], expect["slots"], expect["version"] = release, slots, m.Version()
	expect["lookup"] = map[string]any{"user": "u-42", "cell": route.Cell, "slot": route.Slot}

	// The steps that change the stack, asked for by the script.
	mapFile := strings.TrimPrefix(st.Registry, "file:")
	ctl := control.New(reg, control.Config{Holder: "console browser test"}, control.Options{})
	mux := http.NewServeMux()
	hook := func(path string, f func() (map[string]any, error)) {
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
			out, err := f()
			if err != nil {
				t.Errorf("%s: %v", path, err)
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_ = json.NewEncoder(w).Encode(out)
		})
	}
	hook("/drain", func() (map[string]any, error) {
		out := map[string]any{"cell": "c2"}
		_, err := ctl.Drain(ctx, admin, control.DrainRequest{Cell: "c2", Done: func(r *control.Result) {
			if r.Applied {
				out["version"], out["moved"] = r.Version, r.Plan.MovedSlots
			}
		}})
		return out, err
	})
	hook("/rollout", func() (map[string]any, error) {
		// A rollout's record as its driver writes it while the canary
		// bakes (the console reads only the record).
		waves := []control.Wave{{Cells: []string{"c1"}, Bake: 30 * time.Second}, {Cells: []string{"c3", "c4"}, Bake: 30 * time.Second}}
		if _, err := ctl.StartRollout(ctx, control.Rollout{ID: "r-console", Release: "devel@0123456789ab", From: release["c1"], Waves: waves}); err != nil {
			return nil, err
		}
		_, err := ctl.UpdateRollout(ctx, "r-console", func(r *control.Rollout) error {
			now := time.Now()
			r.SetProgress(false, "c1", control.CellRollout{Phase: control.PhaseBaking})
			r.Bake = &control.BakeStatus{Wave: 0, Started: now.Add(-10 * time.Second), Bake: 30 * time.Second, Judged: now, Decision: "wait",
				Gates: []string{"pass intake 5xx: wave 0 of 120 (0.00%), baseline 0 of 400 (0.00%), Fisher p=1", "wait time to done: 120 of 200 samples"}}
			return nil
		})
		return map[string]any{"id": "r-console"}, err
	})
	hook("/moves", func() (map[string]any, error) {
		// A map change's data moves under way, as the control library
		// records them beside the map (the console reads only the record).
		slots := make([]int, 1465)
		for i := range slots {
			slots[i] = 3 * i
		}
		rec := api.MovesRecord{Version: 99, Change: "weight c3 2", Phase: api.MovesPreparing, Holder: "cellctl weight by ops@host",
			Started: time.Now().Add(-20 * time.Second), Updated: time.Now(),
			Moves: []api.MoveProgress{{Spec: api.MoveSpec{ID: "v99-c1-c3", From: "c1", To: "c3", Slots: slots}, Step: "copying", Copied: 48210, Bytes: 2113404}}}
		data, err := json.Marshal(rec)
		if err != nil {
			return nil, err
		}
		return map[string]any{"id": "v99-c1-c3"}, registry.DocumentFor(reg, api.MovesDocument).Put(ctx, data, 0)
	})
	hook("/kill", func() (map[string]any, error) {
		start := time.Now()
		err := st.Kill(ctx, "c3")
		return map[string]any{"cell": "c3", "ms": time.Since(start).Milliseconds()}, err
	})
	// A router announced by whoever can write the registry, at an admin
	// URL dev up did not configure: the console must not call it.
	rogue := &harvester{}
	rogueSrv := httptest.NewServer(rogue)
	t.Cleanup(rogueSrv.Close)
	hook("/rogue", func() (map[string]any, error) {
		return map[string]any{"id": "rogue"}, reg.(registry.Announcer).Announce(ctx, registry.Announcement{ID: "rogue", Admin: rogueSrv.URL})
	})
	hook("/rogue-calls", func() (map[string]any, error) {
		return map[string]any{"calls": len(rogue.got())}, nil
	})
	hook("/stop-console", func() (map[string]any, error) {
		return map[string]any{}, st.Kill(ctx, "console")
	})
	hook("/break-registry", func() (map[string]any, error) {
		return map[string]any{}, os.Rename(mapFile, mapFile+".away")
	})
	hook("/mend-registry", func() (map[string]any, error) {
		return map[string]any{}, os.Rename(mapFile+".away", mapFile)
	})
	hooks := testkit.Listen(t)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(hooks) }()
	t.Cleanup(func() { _ = srv.Close() })
	expect["hooks"] = "http://" + hooks.Addr().String()

	out := filepath.Join(root, "var", "artifacts", "console")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	expect["out"] = out
	spec, err := json.Marshal(expect)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "browser.mjs"))
	cmd.Env = append(os.Environ(), "CONSOLE_TEST="+string(spec))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	res, err := cmd.Output()
	if err != nil {
		t.Fatalf("the browser: %v\n%s\n%s", err, res, stderr.String())
	}
	var figures struct {
		FirstViewMS  float64 `json:"first_view_ms"`
		AssetsBytes  int     `json:"assets_bytes"`
		ViewBytes    int     `json:"view_bytes"`
		MapBytes     int     `json:"map_bytes"`
		DrainShownMS int     `json:"drain_shown_ms"`
		RedMS        int     `json:"red_after_kill_ms"`
	}
	if err := json.Unmarshal(res, &figures); err != nil {
		t.Fatalf("the browser's figures %q: %v", res, err)
	}
	t.Logf("first view %.0f ms, assets %d bytes (view %d, map %d), drain shown after %d ms, red card %d ms after the kill; screenshots in %s",
		figures.FirstViewMS, figures.AssetsBytes, figures.ViewBytes, figures.MapBytes, figures.DrainShownMS, figures.RedMS, out)
	if time.Duration(figures.FirstViewMS*float64(time.Millisecond)) > firstViewBudget {
		t.Errorf("first view after %.0f ms, budget %s", figures.FirstViewMS, firstViewBudget)
	}
	if figures.AssetsBytes == 0 || figures.AssetsBytes > assetsBudget {
		t.Errorf("the page's assets weigh %d bytes, budget %d", figures.AssetsBytes, assetsBudget)
	}
	if figures.RedMS > 5000 {
		t.Errorf("the killed cell's card turned red after %d ms, want within 5 s", figures.RedMS)
	}
	if *updateScreenshots {
		docs := filepath.Join(root, "docs", "console")
		if err := os.MkdirAll(docs, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"console.png", "console-map.png", "console-drain.png", "console-down.png", "console-registry-down.png", "console-signin.png", "console-rollout.png", "console-refused.png"} {
			b, err := os.ReadFile(filepath.Join(out, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(docs, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestBadValuesInABrowser: a console whose cells expose NaN and ±Inf
// counters, in headless Chromium: the page renders (the view is
// encodable), the bad cell's card is amber and names each value dropped,
// its rates read "bad value", and a cell with nothing bad is green with
// its rates. Screenshot console-bad-values.png.
func TestBadValuesInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	node, chromium, playwright := browser(t, root)
	bad := scraped(t, cellStatus("c1"), func(n int64) string {
		return intake("NaN", fmt.Sprintf("201=%d", 10*n), "200=NaN", "500=+Inf", "shed=-Inf")
	})
	good := scraped(t, cellStatus("c2"), func(n int64) string { return intake("1000", fmt.Sprintf("200=%d", 100*n), "shed=0") })
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80},
		slotmap.Cell{ID: "c1", Weight: 1, Intake: "http://127.0.0.1:1", Admin: bad},
		slotmap.Cell{ID: "c2", Weight: 1, Intake: "http://127.0.0.1:1", Admin: good})
	con, err := console.New(console.Config{Token: token, Interval: 200 * time.Millisecond, TrustedAdmin: adminURLs(reg.Map())},
		console.Options{Registry: reg.Reg, Admin: adminclient.Client{HTTP: &http.Client{}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testkit.Context(t, 2*time.Minute))
	defer cancel()
	ln := testkit.Listen(t)
	done := make(chan struct{})
	go func() { defer close(done); con.Run(ctx) }()
	go func() { _ = con.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()

	out := filepath.Join(root, "var", "artifacts", "console")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(map[string]any{"base": "http://" + ln.Addr().String() + "/", "token": token,
		"chromium": chromium, "playwright": playwright, "out": out})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "values.mjs"))
	cmd.Env = append(os.Environ(), "CONSOLE_TEST="+string(spec))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if res, err := cmd.Output(); err != nil {
		t.Fatalf("the browser: %v\n%s\n%s", err, res, stderr.String())
	}
	if *updateScreenshots {
		b, err := os.ReadFile(filepath.Join(out, "console-bad-values.png"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "docs", "console", "console-bad-values.png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
