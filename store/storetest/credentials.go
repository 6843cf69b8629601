package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// credentialTests check store.TokenStore and store.SecretStore.
var credentialTests = []test{
	{"Tokens", testTokens},
	{"Secrets", testSecrets},
}

func testTokens(t *testing.T, s store.Store) {
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	admin := &berth.Token{ID: "tok-1", Name: "alice", Role: "admin", CreatedBy: "local", CreatedAt: at,
		Models: []string{"org/chat-7b", "Qwen/Qwen2-VL-7B-Instruct"}, RPM: 120} // the gateway's limits
	agent := &berth.Token{ID: "tok-2", Name: "gpu-7", Role: "agent", Worker: "gpu-7", CreatedBy: "join-rack1",
		CreatedAt: at.Add(time.Second), ExpiresAt: at.Add(time.Hour)}
	for _, tok := range []*berth.Token{agent, admin} {
		if err := s.CreateToken(ctx, tok); err != nil {
			t.Fatalf("CreateToken(%s): %v", tok.ID, err)
		}
	}
	dup := *admin
	dup.Name = "mallory"
	if err := s.CreateToken(ctx, &dup); berth.ErrorCode(err) != berth.ECodeConflict {
		t.Fatalf("CreateToken of an existing id: got %v, want a conflict", err)
	}
	got, err := s.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "Tokens, oldest first, a duplicate id changing nothing", got, []*berth.Token{admin, agent})

	revoked, err := s.RevokeToken(ctx, "tok-2", at.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := *agent
	want.RevokedAt = at.Add(time.Minute)
	checkEqual(t, "revoked token", revoked, &want)
	again, err := s.RevokeToken(ctx, "tok-2", at.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "token revoked twice keeps the first time", again, &want)
	if _, err := s.RevokeToken(ctx, "nope", at); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("RevokeToken of an unknown id: got %v, want not found", err)
	}
	got, err = s.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "Tokens after revoking", got, []*berth.Token{admin, &want})
}

func testSecrets(t *testing.T, s store.Store) {
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	bobKey := &berth.Secret{Owner: "bob", Name: "HF_TOKEN", Sealed: []byte{0, 1, 2, 255}, UpdatedBy: "bob", UpdatedAt: at}
	aliceKey := &berth.Secret{Owner: "alice", Name: "HF_TOKEN", Sealed: []byte("sealed-a"), UpdatedBy: "alice", UpdatedAt: at}
	aliceDB := &berth.Secret{Owner: "alice", Name: "DB_PASSWORD", Sealed: []byte("sealed-b"), UpdatedBy: "root", UpdatedAt: at}
	for _, sec := range []*berth.Secret{bobKey, aliceKey, aliceDB} {
		if err := s.PutSecret(ctx, sec); err != nil {
			t.Fatalf("PutSecret(%s/%s): %v", sec.Owner, sec.Name, err)
		}
	}
	replaced := *aliceKey
	replaced.Sealed, replaced.UpdatedAt = []byte("sealed-a2"), at.Add(time.Hour)
	if err := s.PutSecret(ctx, &replaced); err != nil {
		t.Fatal(err)
	}
	all, err := s.Secrets(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "every secret, by owner then name", all, []*berth.Secret{aliceDB, &replaced, bobKey})
	alice, err := s.Secrets(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "alice's secrets", alice, []*berth.Secret{aliceDB, &replaced})

	if err := s.DeleteSecret(ctx, "alice", "HF_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSecret(ctx, "alice", "HF_TOKEN"); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("deleting a deleted secret: got %v, want not found", err)
	}
	all, err = s.Secrets(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "secrets after deleting alice's HF_TOKEN (bob's stays)", all, []*berth.Secret{aliceDB, bobKey})
}
