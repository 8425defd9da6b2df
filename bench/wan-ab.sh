#!/bin/bash
# Two ferry builds A/B through a packet-level link, each build with its own
# `ferry serve` (server namespace) and `ferry cp` (client namespace).
# usage: bench/wan-ab.sh OLD NEW ; env ROUNDS, DELAY (one way ms), LOSS (%), RATE (Mbit/s), MB, OUT,
#        XOLD / XNEW (extra `ferry cp` arguments for each build), CELLS (default: all four)
# docs/internals/bench.md; needs root. ferry-linkem from target/release or $LINKEM.
OLD=$1; NEW=$2; R=${ROUNDS:-3}; OUT=${OUT:-wan-ab.txt}
L=${LINKEM:-$(dirname "$0")/../target/release/ferry-linkem}
D=$(mktemp -d /dev/shm/sbab-XXXX)
mkdir -p $D/root $D/state $D/home $D/dl
ssh-keygen -q -t ed25519 -N '' -f $D/id; cp $D/id.pub $D/ak
head -c $(( ${MB:-512} << 20 )) /dev/urandom > $D/root/big.bin
cp $D/root/big.bin $D/up.bin
$L net cleanup >/dev/null 2>&1
$L net up --name ab --delay-ms ${DELAY:-50} --loss ${LOSS:-0.1} --rate-mbps ${RATE:-1000} > $D/link.txt 2>&1 & LP=$!
for i in $(seq 50); do grep -q ready $D/link.txt && break; sleep 0.2; done
echo "# $(date -u) delay ${DELAY:-50} loss ${LOSS:-0.1} rate ${RATE:-1000} MB ${MB:-512} old=$OLD ${XOLD:-} new=$NEW ${XNEW:-}" >> $OUT
C="ip netns exec ferry-ab-c"
for r in $(seq $R); do
  if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for b in $order; do
    if [ $b = old ]; then F=$OLD; X=${XOLD:-}; else F=$NEW; X=${XNEW:-}; fi
    rm -rf $D/state/* $D/root/up*
    ip netns exec ferry-ab-s env HOME=$D/home $F serve $D/root --sftp 198.19.0.1:0 --https 198.19.0.1:0 --writable --state-dir $D/state --authorized-keys $D/ak > $D/serve.out 2> $D/serve.err & SP=$!
    for i in $(seq 100); do grep -q ready $D/serve.out && break; sleep 0.1; done
    SPORT=$(awk '/^sftp /{n=split($2,a,":"); print a[n]}' $D/serve.out)
    HPORT=$(awk '/^https /{n=split($2,a,":"); print a[n]}' $D/serve.out)
    CERT=$(awk '/^cert /{print $2}' $D/serve.out); TOK=$(awk '/^token /{print $2}' $D/serve.out)
    S="-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -i $D/id"
    H="--pin $CERT --token $TOK"
    for cell in ${CELLS:-sftp-down https-down sftp-up https-up}; do
      case $cell in
        sftp-down) a="$S sftp://root@198.19.0.1:$SPORT/big.bin $D/dl/x" ;;
        https-down) a="$H https://198.19.0.1:$HPORT/big.bin $D/dl/x" ;;
        sftp-up) a="$S $D/up.bin sftp://root@198.19.0.1:$SPORT/up1.bin" ;;
        https-up) a="$H $D/up.bin https://198.19.0.1:$HPORT/up2.bin" ;;
      esac
      t=$( { /usr/bin/time -f "%e %U %S" $C env HOME=$D/home $F cp -q --json $X $a > $D/j.txt; } 2>&1 | tail -1)
      st=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1]).get("streams","?"))' $D/j.txt 2>/dev/null)
      echo "round $r $b $cell $t streams=$st" | tee -a $OUT
      rm -f $D/dl/x; sleep 1
    done
    kill $SP; wait $SP 2>/dev/null
  done
done
kill $LP; wait $LP; tail -3 $D/link.txt >> $OUT
rm -rf $D
