import os,sys,time,subprocess,shutil,random,statistics
n=int(sys.argv[1]); src=sys.argv[2]; bins=[a.split('=',1) for a in sys.argv[3:]]
res={}
for i in range(n+1):
    random.shuffle(bins)
    for name,b in bins:
        shutil.rmtree('/dev/shm/fx/root/up/x',ignore_errors=True); os.makedirs('/dev/shm/fx/root/up/x')
        cmd=[b,'cp','-q','-r',src,'ftp://127.0.0.1:2121/up/x/']
        w=time.time(); subprocess.run(cmd,check=True); w=time.time()-w
        if i>0: res.setdefault(name,[]).append(w)
for k,v in sorted(res.items()):
    print('%-8s wall med %.4f min %.4f'%(k,statistics.median(v),min(v)))
