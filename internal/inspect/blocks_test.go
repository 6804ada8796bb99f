package inspect

import (
	"reflect"
	"testing"
)

func TestDiffBlocksSaysWhatEachBlockDid(t *testing.T) {
	before := []byte(`{"home":{"title":"v1"},"footer":{"links":[1,2]},"old":{"x":1}}`)
	after := []byte(`{"home":{"title":"v2"},"footer":{ "links": [1, 2] },"new":{"y":2}}`)
	got, err := DiffBlocks(before, after)
	if err != nil {
		t.Fatal(err)
	}
	want := []BlockChange{
		{Block: "new", Change: BlockAdded, After: 7},
		{Block: "old", Change: BlockRemoved, Before: 7},
		{Block: "home", Change: BlockChanged, Before: 14, After: 14},
		{Block: "footer", Change: BlockSame, Before: 15, After: 19},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	all, err := DiffBlocks(nil, after)
	if err != nil || len(all) != 3 || all[0].Change != BlockAdded || all[2].Change != BlockAdded {
		t.Fatalf("without an earlier version: %+v, %v", all, err)
	}
	if _, err := DiffBlocks(before, []byte(`[1,2]`)); err == nil {
		t.Fatal("content that is not an object of blocks was compared")
	}
}
