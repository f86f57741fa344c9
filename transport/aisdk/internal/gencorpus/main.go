// Command gencorpus writes random runs' UI message streams, as chatd encodes them, with
// the text each must assemble to: web/test/aisdk-conformance.test.mjs parses every one
// with the AI SDK's own parser.
//
//	go run ./transport/aisdk/internal/gencorpus -n 300 -seed 1
package main

import (
	"encoding/json"
	"flag"
	"math/rand/v2"
	"os"

	"github.com/chatd/chatd/transport/aisdk"
)

func main() {
	n := flag.Int("n", 200, "streams")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	rng := rand.New(rand.NewPCG(*seed, *seed))
	type item struct {
		Stream    string   `json:"stream"`
		Text      []string `json:"text"`
		Reasoning []string `json:"reasoning"`
	}
	items := make([]item, *n)
	for i := range items {
		s, t, r := aisdk.RandomRun(rng)
		items[i] = item{s, t, r}
	}
	if err := json.NewEncoder(os.Stdout).Encode(items); err != nil {
		os.Exit(1)
	}
}
