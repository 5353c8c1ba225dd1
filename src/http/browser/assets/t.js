(function(){try{
var s=document.currentScript,n=navigator,L=location,w=window,k="adevents_vid",id,last;
if(!s||(s.hasAttribute("data-respect-gpc")&&n.globalPrivacyControl===true))return;
var site=s.getAttribute("data-site")||"",u=s.src.replace(/\/t\.js([?#].*)?$/,"")+"/track";
try{id=localStorage.getItem(k)}catch(e){}
if(!id){id=w.crypto&&crypto.randomUUID?crypto.randomUUID():Date.now().toString(36)+Math.random().toString(36).slice(2);try{localStorage.setItem(k,id)}catch(e){}}
var send=function(spa){try{
var p=L.pathname,key=p+L.search;if(key===last)return;last=key;
var r="direct",q=new URLSearchParams(L.search),f=new FormData();
try{if(spa)r=L.hostname;else if(document.referrer)r=new URL(document.referrer).hostname||r}catch(e){}
f.append("site",site);f.append("guid",id);f.append("referrer",r);f.append("page",p);
["utm_source","utm_campaign"].forEach(function(x){var v=q.get(x);if(v)f.append(x,v)});
if(!(n.sendBeacon&&n.sendBeacon(u,f)))new Image().src=u+"?"+new URLSearchParams(f);
}catch(e){}};
var h=w.history,o=h&&h.pushState;
if(o)h.pushState=function(){var v=o.apply(this,arguments);send(1);return v};
w.addEventListener("popstate",function(){send(1)});
send();
}catch(e){}})();
