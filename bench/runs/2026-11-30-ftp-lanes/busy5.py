import os,sys,time,subprocess,shutil,random,statistics
# busy5.py N SRC DSTURL name=bin ...   (upload to ferry serve)
def st(): return list(map(int,open('/proc/stat').readline().split()[1:]))
n=int(sys.argv[1]); src=sys.argv[2]; url=sys.argv[3]; bins=[a.split('=',1) for a in sys.argv[4:]]; res={}
for i in range(n+1):
    random.shuffle(bins)
    for name,b in bins:
        shutil.rmtree('/dev/shm/fs/root/x',ignore_errors=True); os.makedirs('/dev/shm/fs/root/x'); os.sync()
        a=st(); w=time.time()
        subprocess.run([b,'cp','-q','-r',src,url],check=True,env=dict(os.environ,FERRY_PASSWORD='tok123'))
        w=time.time()-w; c=st()
        if i>0: res.setdefault(name,[]).append((w,(c[3]-a[3])/100,(c[0]+c[2]+c[6]-a[0]-a[2]-a[6])/100))
for k,v in sorted(res.items()):
    print('%-8s wall med %.3f  idle %.3f  busy %.3f'%(k,statistics.median(x[0] for x in v),statistics.median(x[1] for x in v),statistics.median(x[2] for x in v)))
