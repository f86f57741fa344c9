package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMakeFlags(t *testing.T) {
	assert.Equal(t, "", makeFlags("chatd-bench -chatd bin/chatd"))
	assert.Equal(t, " BENCH_FLAGS='-full'", makeFlags("chatd-bench -chatd bin/chatd -full"))
	assert.Equal(t, " BENCH_FLAGS='-chatd bin/chatd-before -out x.md'", makeFlags("chatd-bench -chatd bin/chatd-before -out x.md"))
}
