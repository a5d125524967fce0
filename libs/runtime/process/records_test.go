package process

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/testenv"
)

// ownerEnv makes the test binary a stand-in pod worker (TestMain): it runs
// a runtime with the records directory it names, starts one container whose
// shell leaves a background child, prints the child's pid, and waits to be
// killed.
const ownerEnv = "SPLITLET_PROCESS_TEST_OWNER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(ownerEnv); dir != "" {
		if err := runOwner(dir); err != nil {
			fmt.Fprintln(os.Stderr, "owner:", err)
			os.Exit(1)
		}
		select {}
	}
	os.Exit(m.Run())
}

func runOwner(dir string) error {
	r, err := New(WithRootDir(filepath.Join(dir, "root")), WithRecordDir(filepath.Join(dir, "records")))
	if err != nil {
		return err
	}
	p := shPod("u-owner", `sleep 300 & echo $! > child; wait`)
	p.Spec.Containers[0].WorkingDir = dir
	if _, err := r.StartContainer(context.Background(), p, &p.Spec.Containers[0], 0, runtime.StartOptions{}); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(dir, "child")); err == nil && strings.HasSuffix(string(b), "\n") {
			fmt.Printf("child %s", b)
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("the container did not write its child's pid")
}

// running says whether pid is a live process (a zombie is reaped, when it
// is this process's, and counts as gone).
func running(pid int) bool {
	s, err := readProcStat(pid)
	if err != nil {
		return false
	}
	if s.state == 'Z' || s.state == 'X' {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		return false
	}
	return true
}

// A pod worker killed with SIGKILL takes its containers' leaders with it
// but not what they started; the next runtime on the same records finds
// and kills those, and leaves the groups of live owners alone.
func TestSweepKillsWhatADeadOwnerLeft(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ownerEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("owner: %v", err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "child ")))
	if err != nil || child <= 1 {
		t.Fatalf("owner said %q", line)
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL); running(child) })

	// While the owner lives, its group is its own.
	r := newRuntime(t, WithRecordDir(filepath.Join(dir, "records")), WithSweepInterval(time.Hour))
	if n := r.Sweep(); n != 0 || !running(child) {
		t.Fatalf("a sweep with the owner alive killed %d processes (child running: %v)", n, running(child))
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	// The leader went with the owner (Pdeathsig); the background child
	// did not: that is the leak the records are for.
	if !running(child) {
		t.Fatal("the background child died with its owner: the test cannot show the sweep")
	}
	// A new runtime on the same records sweeps at start.
	r2, err := New(WithRootDir(t.TempDir()), WithRecordDir(filepath.Join(dir, "records")))
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	testenv.EventuallyTrue(t, 20*time.Second, "the dead owner's background child killed", func() bool { return !running(child) })
	if left, _ := filepath.Glob(filepath.Join(dir, "records", "*")); len(left) != 0 {
		t.Errorf("records left after the sweep: %v", left)
	}
}

// A container that ends normally leaves no record behind.
func TestRecordsFollowGroups(t *testing.T) {
	records := filepath.Join(t.TempDir(), "records")
	r := newRuntime(t, WithRecordDir(records), WithSweepInterval(time.Hour))
	p := shPod("u-rec", `sleep 300`, `exit 3`)
	st := r.start(p, 0, 0)
	ex := r.start(p, 1, 0)
	r.waitExit(ex.ID)
	got, _ := filepath.Glob(filepath.Join(records, "*.json"))
	if len(got) != 1 {
		t.Fatalf("records with one container running: %v", got)
	}
	if err := r.StopContainer(t.Context(), st.ID, 0); err != nil {
		t.Fatal(err)
	}
	r.waitExit(st.ID)
	testenv.EventuallyTrue(t, 20*time.Second, "no record left", func() bool { got, _ := filepath.Glob(filepath.Join(records, "*")); return len(got) == 0 })
	if err := os.Chmod(records, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := New(WithRootDir(t.TempDir()), WithRecordDir(records)); err == nil {
		t.Error("a records directory others can write to was accepted")
	}
}
