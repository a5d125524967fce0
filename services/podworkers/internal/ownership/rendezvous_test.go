package ownership

import (
	"fmt"
	"slices"
	"testing"
)

func owners(parts int, live []string) []string {
	out := make([]string, parts)
	for p := range out {
		out[p] = Preferred(p, live)
	}
	return out
}

// Every replica computes the same owners whatever order it lists the live
// replicas in, and the shares are not lopsided.
func TestRendezvousDeterministicAndSpread(t *testing.T) {
	const parts = 64
	live := []string{"podworkers-0", "podworkers-1", "podworkers-2"}
	want := owners(parts, live)
	if got := owners(parts, []string{"podworkers-2", "podworkers-0", "podworkers-1"}); !slices.Equal(got, want) {
		t.Fatalf("order of the live list changed the owners:\n%v\n%v", got, want)
	}
	if got := owners(parts, live); !slices.Equal(got, want) {
		t.Fatal("not deterministic")
	}
	count := map[string]int{}
	for _, o := range want {
		count[o]++
	}
	for _, id := range live {
		if count[id] < parts/6 {
			t.Fatalf("shares %v: %s gets too few", count, id)
		}
	}
	if Preferred(3, nil) != "" || Preferred(3, []string{"only"}) != "only" {
		t.Fatal("empty or single live set")
	}
}

// A replica that joins takes only partitions from the others (each moved
// partition goes to it); one that leaves gives only its own away.
func TestRendezvousMovesOnlyWhatMust(t *testing.T) {
	const parts = 128
	for _, n := range []int{1, 2, 3, 5, 8} {
		var live []string
		for i := 0; i < n; i++ {
			live = append(live, fmt.Sprintf("r%d", i))
		}
		before := owners(parts, live)
		joined := owners(parts, append(slices.Clone(live), "new"))
		moved := 0
		for p := range before {
			if joined[p] != before[p] {
				moved++
				if joined[p] != "new" {
					t.Fatalf("n=%d: join moved partition %d from %s to %s", n, p, before[p], joined[p])
				}
			}
		}
		if moved == 0 {
			t.Fatalf("n=%d: the new replica got nothing", n)
		}
		if n == 1 {
			continue
		}
		gone := live[1]
		left := owners(parts, slices.DeleteFunc(slices.Clone(live), func(id string) bool { return id == gone }))
		for p := range before {
			if left[p] != before[p] && before[p] != gone {
				t.Fatalf("n=%d: %s leaving moved partition %d of %s", n, gone, p, before[p])
			}
			if left[p] == gone {
				t.Fatalf("n=%d: partition %d still on the replica that left", n, p)
			}
		}
	}
}
