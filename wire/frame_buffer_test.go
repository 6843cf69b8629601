package wire_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/berth-dev/berth/wire"
)

// TestFrameBufferReadsEachFrameWhole: each Read returns exactly the
// frame read, whatever the size of the frame before it (a small one after
// a large one, a large one after one over the kept size), and a
// reader's error is returned with no frame.
func TestFrameBufferReadsEachFrameWhole(t *testing.T) {
	var f wire.FrameBuffer
	for _, n := range []int{10, 70_000, 3, 2 << 20, 5, 0, 100} {
		want := bytes.Repeat([]byte{'a' + byte(n%26)}, n)
		got, err := f.Read(iotest.HalfReader(bytes.NewReader(want)))
		if err != nil {
			t.Fatalf("frame of %d bytes: %v", n, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("frame of %d bytes: read %d bytes %.20q…", n, len(got), got)
		}
	}
	boom := errors.New("connection reset")
	got, err := f.Read(io.MultiReader(strings.NewReader("part"), iotest.ErrReader(boom)))
	if !errors.Is(err, boom) || got != nil {
		t.Fatalf("Read of a failing reader = %q, %v; want nil, %v", got, err, boom)
	}
}
