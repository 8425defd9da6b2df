#!/bin/bash
# runstart.sh OLD NEW RUNS OUT: interleaved, loss100, 512 MiB: download from sshd and ferry serve, upload to sshd
OLD=$1; NEW=$2; N=$3; OUT=$4
cd /var/tmp/wan/bed
for i in $(seq $N); do
  for v in old new; do
    F=$OLD; [ $v = new ] && F=$NEW
    ./meas.py $v-down-sshd -- $F cp -q -F ssh_config bench:/var/tmp/wan/src/f512 /var/tmp/wan/dst/
    ./meas.py $v-down-ferry-serve -- $F cp -q -F ssh_config fs:/f512 /var/tmp/wan/dst/
    rm -rf /var/tmp/wan/up/*; sync
    ./meas.py $v-up-sshd -- $F cp -q -F ssh_config /var/tmp/wan/src/f512 bench:/var/tmp/wan/up/
    rm -rf /var/tmp/wan/up/*; sync
  done
done > $OUT
