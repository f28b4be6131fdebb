package migrate_test

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/internal/migrate"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	file := func(sql string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(sql)} }
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    []int
		wantErr string
	}{
		{name: "in order", files: fstest.MapFS{"m/0002_b.sql": file("B"), "m/0001_a.sql": file("A")}, want: []int{1, 2}},
		{name: "gap", files: fstest.MapFS{"m/0001_a.sql": file("A"), "m/0003_c.sql": file("C")}, wantErr: "without gaps"},
		{name: "bad name", files: fstest.MapFS{"m/1_a.sql": file("A")}, wantErr: "0001_name.sql"},
		{name: "no folder", files: fstest.MapFS{}, wantErr: "read embedded migrations"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ms, err := migrate.Load(tt.files, "m")
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			var got []int
			for _, m := range ms {
				got = append(got, m.Version)
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestApplyRejectsAnUnsafeTableName(t *testing.T) {
	t.Parallel()
	_, err := migrate.Apply(t.Context(), nil, migrate.Set{Table: `x"; DROP TABLE y; --`}, nil)
	require.ErrorContains(t, err, "table name")
}
