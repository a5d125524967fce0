package gc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
)

// ImagePolicy is the image GC policy (kubelet: ImageGCPolicy).
type ImagePolicy struct {
	// HighThresholdPercent: image GC runs when the image filesystem is
	// this full (percent used); LowThresholdPercent: it frees space down
	// to this.
	HighThresholdPercent, LowThresholdPercent int
	// MinAge: an image first seen less than this long ago stays.
	MinAge time.Duration
	// MaxAge > 0: an image unused this long is removed whatever the
	// usage; 0: off.
	MaxAge time.Duration
}

// imageRecord is what the collector knows of one image.
type imageRecord struct {
	firstDetected, lastUsed time.Time
	size                    int64
	pinned                  bool
	tags                    []string
}

// Images collects unused images.
type Images struct {
	rt     ImageRuntime
	policy ImagePolicy
	log    *zap.Logger
	// began is when the collector started: images are not removed for
	// their age before MaxAge has passed since (a restarted collector
	// knows no last use).
	began time.Time

	mu      sync.Mutex
	records map[string]*imageRecord
}

// NewImages returns an image collector on rt.
func NewImages(rt ImageRuntime, p ImagePolicy, log *zap.Logger) *Images {
	if log == nil {
		log = zap.NewNop()
	}
	return &Images{rt: rt, policy: p, log: log, began: time.Now(), records: map[string]*imageRecord{}}
}

// candidate is an image that may go, with its record as of the pass.
type candidate struct {
	id string
	imageRecord
}

// detect reads the runtime's images: a new one is first detected now, one in
// use was last used now; records of images gone are dropped.
func (g *Images) detect(ctx context.Context, now time.Time) error {
	images, err := g.rt.Images(ctx)
	if err != nil {
		return fmt.Errorf("list images: %w", err)
	}
	inUse, err := g.rt.ImagesInUse(ctx)
	if err != nil {
		return fmt.Errorf("list the images in use: %w", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := make(map[string]bool, len(images))
	for _, img := range images {
		seen[img.ID] = true
		rec := g.records[img.ID]
		if rec == nil {
			rec = &imageRecord{firstDetected: now}
			g.records[img.ID] = rec
		}
		if inUse[img.ID] {
			rec.lastUsed = now
		}
		rec.size, rec.pinned, rec.tags = img.Size, img.Pinned, img.Tags
	}
	for id := range g.records {
		if !seen[id] {
			delete(g.records, id)
		}
	}
	return nil
}

// evictionOrder lists the images not in use at now and not pinned, least
// recently used first, then first detected first.
func (g *Images) evictionOrder(ctx context.Context, now time.Time) ([]candidate, error) {
	if err := g.detect(ctx, now); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []candidate
	for id, rec := range g.records {
		if rec.lastUsed.Equal(now) || rec.pinned {
			continue
		}
		out = append(out, candidate{id: id, imageRecord: *rec})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.lastUsed.Equal(b.lastUsed) {
			return a.lastUsed.Before(b.lastUsed)
		}
		if !a.firstDetected.Equal(b.firstDetected) {
			return a.firstDetected.Before(b.firstDetected)
		}
		return a.id < b.id
	})
	return out, nil
}

// remove removes one image and its record.
func (g *Images) remove(ctx context.Context, c candidate, why string) error {
	if err := g.rt.RemoveImage(ctx, c.id); err != nil {
		return fmt.Errorf("remove image %s: %w", c.id, err)
	}
	g.mu.Lock()
	delete(g.records, c.id)
	g.mu.Unlock()
	g.log.Info("removed unused image", zap.String("image", c.id), zap.Strings("tags", c.tags), zap.Int64("size", c.size), zap.String("why", why))
	return nil
}

// freeSpace removes images of list in order, but those younger than
// MinAge, until want bytes are freed; it returns those left and what it
// freed.
func (g *Images) freeSpace(ctx context.Context, want int64, now time.Time, list []candidate) ([]candidate, int64, error) {
	var errs []error
	var freed int64
	var left []candidate
	for i, c := range list {
		if now.Sub(c.firstDetected) < g.policy.MinAge {
			left = append(left, c)
			continue
		}
		if err := g.remove(ctx, c, "space"); err != nil {
			errs = append(errs, err)
			left = append(left, c)
			continue
		}
		freed += c.size
		if freed >= want {
			left = append(left, list[i+1:]...)
			break
		}
	}
	return left, freed, errors.Join(errs...)
}

// freeOld removes the images unused for longer than MaxAge (none before
// the collector has run MaxAge).
func (g *Images) freeOld(ctx context.Context, now time.Time, list []candidate) ([]candidate, error) {
	if g.policy.MaxAge <= 0 || now.Sub(g.began) <= g.policy.MaxAge {
		return list, nil
	}
	var errs []error
	var left []candidate
	for _, c := range list {
		last := c.lastUsed
		if last.IsZero() {
			last = c.firstDetected
		}
		if now.Sub(last) <= g.policy.MaxAge {
			left = append(left, c)
			continue
		}
		if err := g.remove(ctx, c, "age"); err != nil {
			errs = append(errs, err)
			left = append(left, c)
		}
	}
	return left, errors.Join(errs...)
}

// ErrNotEnoughSpace: image GC could not free enough (kubelet's
// FreeDiskSpaceFailed).
var ErrNotEnoughSpace = errors.New("insufficient free disk space on the node's image filesystem")

// GarbageCollect is one pass of image GC: the images unused for longer
// than MaxAge go; then, when the image filesystem is at least
// HighThresholdPercent full, unused images go, least recently used first,
// until it is at most LowThresholdPercent full.
func (g *Images) GarbageCollect(ctx context.Context) error {
	now := time.Now()
	list, err := g.evictionOrder(ctx, now)
	if err != nil {
		return err
	}
	if list, err = g.freeOld(ctx, now, list); err != nil {
		return err
	}
	fs, err := g.rt.ImageFsUsage(ctx)
	if err != nil {
		return fmt.Errorf("image filesystem usage: %w", err)
	}
	if fs.Available > fs.Capacity {
		fs.Available = fs.Capacity
	}
	if fs.Capacity <= 0 {
		return errors.New("invalid capacity 0 on image filesystem")
	}
	used := 100 - int(fs.Available*100/fs.Capacity)
	if used < g.policy.HighThresholdPercent {
		return nil
	}
	want := fs.Capacity*int64(100-g.policy.LowThresholdPercent)/100 - fs.Available
	g.log.Info("image filesystem above the high threshold: removing unused images", zap.Int("usedPercent", used),
		zap.Int("highThresholdPercent", g.policy.HighThresholdPercent), zap.Int64("bytesToFree", want))
	_, freed, err := g.freeSpace(ctx, want, now, list)
	if err != nil {
		return err
	}
	if freed < want {
		return fmt.Errorf("%w (%d%% of %d bytes used): freed %d bytes of the %d wanted by deleting unused images", ErrNotEnoughSpace, used, fs.Capacity, freed, want)
	}
	return nil
}

// DeleteUnusedImages removes every unused image older than MinAge (kubelet:
// what eviction calls); freed is the sum of their sizes.
func (g *Images) DeleteUnusedImages(ctx context.Context) (int64, error) {
	now := time.Now()
	list, err := g.evictionOrder(ctx, now)
	if err != nil {
		return 0, err
	}
	_, freed, err := g.freeSpace(ctx, math.MaxInt64, now, list)
	return freed, err
}
