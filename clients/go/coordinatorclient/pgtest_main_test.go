package coordinatorclient_test

import (
	"os"
	"testing"

	"github.com/twophase/coordinator/store/pgtest"
)

// TestMain drops the template database the tests cloned theirs from, once they are done.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
