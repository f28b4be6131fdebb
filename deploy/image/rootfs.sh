#!/bin/sh
# rootfs.sh BINARY DIR writes into DIR the whole content of Ferry's image,
# whose final stage is FROM scratch and copies DIR to /:
#   /ferry                              BINARY, the static ferry command (CGO_ENABLED=0)
#   /etc/ssl/certs/ca-certificates.crt  the CA certificates of Debian's ca-certificates
#                                       package (for sslmode=verify-full, amqps, Temporal TLS)
#   /usr/share/zoneinfo                 time zones, from Debian's tzdata package
#   /etc/passwd, /etc/group             root, and nonroot (65532), whom the image runs as
#   /etc/nsswitch.conf                  hosts: files, then DNS
#   /home/nonroot, /tmp                 a home of nonroot's, and a sticky /tmp
# No shell, no package manager. The Dockerfile's build stage runs this script
# on its own Debian packages; the image test (dev/e2e/image_test.go) runs it
# on the packages of the machine it runs on, then builds the Dockerfile's
# final stage as it is. The bundle is made from the package's certificates
# alone: CAs added on the building machine (/usr/local/share/ca-certificates)
# stay out of the image.
set -eu

if [ $# -ne 2 ]; then
  echo "usage: rootfs.sh BINARY DIR" >&2
  exit 2
fi
bin=$1
out=$2
certs=/usr/share/ca-certificates/mozilla
zones=/usr/share/zoneinfo

[ -f "$bin" ] || { echo "rootfs.sh: $bin is not a file: build the static ferry first (cd cmd/ferry && CGO_ENABLED=0 go build)" >&2; exit 1; }
ls "$certs"/*.crt >/dev/null 2>&1 || { echo "rootfs.sh: no certificates in $certs: install Debian's ca-certificates package" >&2; exit 1; }
[ -f "$zones/UTC" ] || { echo "rootfs.sh: no $zones/UTC: install Debian's tzdata package" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/etc/ssl/certs" "$out/usr/share" "$out/home/nonroot" "$out/tmp"
cp "$bin" "$out/ferry"
chmod 0755 "$out/ferry"
# The order of the glob is the C locale's, whatever the caller's locale.
LC_ALL=C
export LC_ALL
cat "$certs"/*.crt > "$out/etc/ssl/certs/ca-certificates.crt"
cp -R -P "$zones" "$out/usr/share/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$out/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$out/etc/group"
printf 'hosts: files dns\n' > "$out/etc/nsswitch.conf"
chmod 0644 "$out/etc/passwd" "$out/etc/group" "$out/etc/nsswitch.conf" "$out/etc/ssl/certs/ca-certificates.crt"
chown 65532:65532 "$out/home/nonroot"
chmod 0755 "$out/home/nonroot"
chmod 1777 "$out/tmp"
