#!/bin/bash
# runab.sh OLD NEW RUNS OUT: interleaved old/new, loss100 (16-conn widened 512 MiB, one conn 128 MiB) and loopback 1 GiB
OLD=$1; NEW=$2; N=$3; OUT=$4
cd /var/tmp/wan/bed
for i in $(seq $N); do
  for v in old new; do
    F=$OLD; [ $v = new ] && F=$NEW
    ./meas.py $v-loss100-widened -- $F cp -q -F ssh_config bench:/var/tmp/wan/src/f512 /var/tmp/wan/dst/
    ./meas.py $v-loss100-one -- $F cp -q -F ssh_config --max-streams 1 bench:/var/tmp/wan/src/f128 /var/tmp/wan/dst/
    SPID=/var/tmp/wan/bed/sshd-lo.pid2 ./meas.py $v-loopback -- $F cp -q -F ssh_config lo:/var/tmp/wan/src/f1g /var/tmp/wan/dst/
  done
done > $OUT
