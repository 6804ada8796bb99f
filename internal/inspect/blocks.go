package inspect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// Block changes, as BlockChange.Change says them.
const (
	BlockAdded   = "added"
	BlockRemoved = "removed"
	BlockChanged = "changed"
	BlockSame    = "same"
)

// BlockChange is how one block of a Decofile's content differs between two versions.
type BlockChange struct {
	// Block is the block's name.
	Block string `json:"block"`
	// Change is one of BlockAdded, BlockRemoved, BlockChanged, BlockSame.
	Change string `json:"change"`
	// Before and After are the block's sizes in bytes in each version (0 when absent).
	Before int `json:"before"`
	After  int `json:"after"`
}

// DiffBlocks compares two versions of a merged content (a JSON object of blocks) block by block:
// changes first (added, removed, changed), then the blocks that stayed the same, each by name.
// before may be nil: every block is then added.
func DiffBlocks(before, after []byte) ([]BlockChange, error) {
	old, err := blocksOf(before)
	if err != nil {
		return nil, fmt.Errorf("the earlier content: %w", err)
	}
	cur, err := blocksOf(after)
	if err != nil {
		return nil, fmt.Errorf("the current content: %w", err)
	}
	var out []BlockChange
	for name, v := range cur {
		c := BlockChange{Block: name, After: len(v)}
		switch o, ok := old[name]; {
		case !ok:
			c.Change = BlockAdded
		case bytes.Equal(compact(o), compact(v)):
			c.Change, c.Before = BlockSame, len(o)
		default:
			c.Change, c.Before = BlockChanged, len(o)
		}
		out = append(out, c)
	}
	for name, o := range old {
		if _, ok := cur[name]; !ok {
			out = append(out, BlockChange{Block: name, Change: BlockRemoved, Before: len(o)})
		}
	}
	rank := map[string]int{BlockAdded: 0, BlockRemoved: 1, BlockChanged: 2, BlockSame: 3}
	slices.SortFunc(out, func(a, b BlockChange) int {
		if d := rank[a.Change] - rank[b.Change]; d != 0 {
			return d
		}
		return bytes.Compare([]byte(a.Block), []byte(b.Block))
	})
	return out, nil
}

func blocksOf(content []byte) (map[string]json.RawMessage, error) {
	blocks := map[string]json.RawMessage{}
	if content == nil {
		return blocks, nil
	}
	if err := json.Unmarshal(content, &blocks); err != nil {
		return nil, fmt.Errorf("not a JSON object of blocks: %w", err)
	}
	return blocks, nil
}

func compact(v json.RawMessage) []byte {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return v
	}
	return b.Bytes()
}
