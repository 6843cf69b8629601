package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func testKeys(t testing.TB, fill byte) *Keys {
	t.Helper()
	k, err := NewKeys(bytes.Repeat([]byte{fill}, MasterKeySize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestNewKeysDerivation(t *testing.T) {
	t.Parallel()
	master := bytes.Repeat([]byte{1}, 32)
	k, err := NewKeys(master)
	if err != nil {
		t.Fatal(err)
	}
	want := func(label string) []byte {
		m := hmac.New(sha256.New, master)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	if !bytes.Equal(k.sign, want("berth token signing v1")) {
		t.Error("signing key is not HMAC-SHA256(master, \"berth token signing v1\")")
	}
	if !bytes.Equal(k.enc, want("berth secret encryption v1")) {
		t.Error("encryption key is not HMAC-SHA256(master, \"berth secret encryption v1\")")
	}
	if bytes.Equal(k.sign, k.enc) || bytes.Equal(k.sign, master) {
		t.Error("derived keys must differ from each other and from the master")
	}
	for _, n := range []int{0, 16, 31, 33, 64} {
		if _, err := NewKeys(make([]byte, n)); err == nil {
			t.Errorf("NewKeys(%d bytes): want error", n)
		}
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "master.key")
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %o, want 600", fi.Mode().Perm())
	}
	di, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("created directory mode %o, want 700", di.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(strings.TrimSpace(string(data))); got != 64 {
		t.Errorf("key file holds %d characters, want 64 hex digits", got)
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k1.sign, k2.sign) || !bytes.Equal(k1.enc, k2.enc) {
		t.Error("second load derived different keys")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the key (temporary file left behind?)", len(entries))
	}
}

func TestLoadOrCreateKeyConcurrentFirstUse(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "master.key")
	const n = 8
	keys := make([]*Keys, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { keys[i], errs[i] = LoadOrCreateKey(path) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if !bytes.Equal(keys[i].sign, keys[0].sign) {
			t.Fatalf("caller %d got a different key than caller 0", i)
		}
	}
}

func TestLoadOrCreateKeyRejects(t *testing.T) {
	t.Parallel()
	good := strings.Repeat("ab", 32) + "\n"
	tests := []struct {
		name    string
		content string
		mode    os.FileMode
		want    string
	}{
		{"group readable", good, 0o640, "chmod 600"},
		{"world readable", good, 0o604, "chmod 600"},
		{"too short", strings.Repeat("ab", 31), 0o600, "64 hex digits"},
		{"too long", strings.Repeat("ab", 33), 0o600, "64 hex digits"},
		{"not hex", strings.Repeat("zz", 32), 0o600, "64 hex digits"},
		{"empty", "", 0o600, "64 hex digits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "master.key")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, err := LoadOrCreateKey(path)
			if err == nil {
				t.Fatal("want error")
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q should name %s and say %q", err, path, tt.want)
			}
			after, rerr := os.ReadFile(path)
			if rerr != nil || string(after) != tt.content {
				t.Error("a rejected key file must be left as it was")
			}
		})
	}
}
