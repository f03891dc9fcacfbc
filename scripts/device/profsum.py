import sys,re
# usage: profsum.py FILE M TICKS [EXTRA_M,...]: ms a tick by part; EXTRA_M: other launch sizes of the tick's rows (e.g. 128,32)
f=sys.argv[1]; M=sys.argv[2]; ticks=float(sys.argv[3])
ms=[M]+(sys.argv[4].split(',') if len(sys.argv)>4 else [])
alt='(?:%s)'%'|'.join(ms)
cats={}
for line in open(f):
    m=re.match(r'\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(.*)$',line)
    if not m: continue
    tot=float(m.group(1)); op=m.group(5)
    def add(c): cats[c]=cats.get(c,0)+tot
    if re.search(r'attention fp8 M=%s T=1 H=32'%M,op): add('temporal attention')
    elif re.search(r'linear.*int4 [0-9x]+ M=%s$'%alt,op): add('temporal linears int4')
    elif re.search(r'linear int8 32000x4096 M=%s$'%alt,op) or re.search(r'linear int8 2048x4096',op): add('text head / in')
    elif re.search(r'linear.*int8 [0-9x]+ M=%s$'%alt,op): add('depformer linears int8')
    elif re.search(r'attention .* H=16 Dh=64 cap=16',op) and ('M=%s '%M) in op: add('depformer attention')
    elif re.search(r'conv',op) and ('M=%s'%M) in op: add('Mimi conv')
    elif re.search(r'linear f32|attention f32|layernorm',op) and 'cap=16' not in op: add('Mimi transformer')
    elif re.search(r'vq_',op): add('vq')
    elif re.search(r'sample',op): add('sample')
for k,v in sorted(cats.items(), key=lambda x:-x[1]): print(f"{k:28s} {v/ticks:8.2f} ms/tick")
print("sum", sum(cats.values())/ticks)
