package gc

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// table is an image store in memory: the policy's arithmetic and order
// (the removal on a real runtime is tested with the cri runtime).
type table struct {
	images  []Image
	inUse   map[string]bool
	usage   FsUsage
	removed []string
}

func (s *table) Images(context.Context) ([]Image, error) { return slices.Clone(s.images), nil }
func (s *table) ImagesInUse(context.Context) (map[string]bool, error) {
	return s.inUse, nil
}
func (s *table) ImageFsUsage(context.Context) (FsUsage, error) { return s.usage, nil }
func (s *table) RemoveImage(_ context.Context, id string) error {
	s.images = slices.DeleteFunc(s.images, func(i Image) bool { return i.ID == id })
	s.removed = append(s.removed, id)
	s.usage.Available += 10
	return nil
}

// Above the high threshold, unused images go least recently used first
// until the low one is reached; in-use and pinned images never go; an
// image used in an earlier pass goes after those never used.
func TestImagesFreeSpace(t *testing.T) {
	s := &table{
		images: []Image{{ID: "a", Size: 10}, {ID: "b", Size: 10}, {ID: "c", Size: 10}, {ID: "pause", Size: 10, Pinned: true}, {ID: "used", Size: 10}},
		inUse:  map[string]bool{"a": true, "used": true},
		usage:  FsUsage{Capacity: 100, Available: 20},
	}
	g := NewImages(s, ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80}, nil)
	if err := g.GarbageCollect(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(s.removed) != 0 {
		t.Fatalf("removed %v at 80%% used, below the high threshold", s.removed)
	}
	s.inUse = map[string]bool{"used": true} // a was used once, no more
	s.usage.Available = 10                  // 90%: 10 bytes to free
	if err := g.GarbageCollect(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.removed, []string{"b"}) {
		t.Fatalf("removed %v, want [b] (never used, before a)", s.removed)
	}
	s.usage.Available = 0 // 100%: 20 bytes to free, only a and c may go
	err := g.GarbageCollect(t.Context())
	if !slices.Equal(s.removed, []string{"b", "c", "a"}) || err != nil {
		t.Fatalf("removed %v (%v), want b, c, a", s.removed, err)
	}
	s.usage.Available = 0
	if err := g.GarbageCollect(t.Context()); !errors.Is(err, ErrNotEnoughSpace) {
		t.Fatalf("with only in-use and pinned images left: %v, want %v", err, ErrNotEnoughSpace)
	}
}

// An image younger than the minimum age stays; past the maximum age an
// unused image goes whatever the usage; DeleteUnusedImages removes every
// unused image.
func TestImagesAges(t *testing.T) {
	s := &table{images: []Image{{ID: "a", Size: 10}, {ID: "b", Size: 7}}, inUse: map[string]bool{}, usage: FsUsage{Capacity: 100, Available: 0}}
	g := NewImages(s, ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Hour}, nil)
	if err := g.GarbageCollect(t.Context()); !errors.Is(err, ErrNotEnoughSpace) || len(s.removed) != 0 {
		t.Fatalf("young images: removed %v, %v", s.removed, err)
	}
	old := NewImages(s, ImagePolicy{HighThresholdPercent: 100, LowThresholdPercent: 80, MaxAge: time.Minute}, nil)
	old.began = time.Now().Add(-time.Hour)
	if err := old.detect(t.Context(), time.Now().Add(-2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	s.images = append(s.images, Image{ID: "new", Size: 1})
	s.usage.Available = 50
	if err := old.GarbageCollect(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.removed, []string{"a", "b"}) && !slices.Equal(s.removed, []string{"b", "a"}) {
		t.Fatalf("removed %v past the maximum age, want a and b", s.removed)
	}
	freed, err := NewImages(s, ImagePolicy{}, nil).DeleteUnusedImages(t.Context())
	if err != nil || freed != 1 || len(s.images) != 0 {
		t.Fatalf("DeleteUnusedImages freed %d, %v; left %v", freed, err, s.images)
	}
}
